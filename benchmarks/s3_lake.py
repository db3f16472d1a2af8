"""What a lake on object storage costs: ``graphlake demo`` into a local folder and into an S3-compatible
server on loopback (moto's), side by side in one run, and a read of every table from an empty cache.
Loopback has no network latency: the ratio is the protocol's cost (uploads, listings, conditional
puts, leases), a floor for a real store.

    .venv/bin/python benchmarks/s3_lake.py
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, arguments, header

sys.path.insert(0, str(ROOT / "tests"))
from lake_checks import rows  # noqa: E402  (the tests' helper, not a package module)

GRAPHLAKE = str(Path(sys.executable).with_name("graphlake"))


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - started


def main() -> None:
    options = arguments("graphlake demo on local disk and on an S3-compatible server", "s3_lake.md")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        aws = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
        os.environ.update(aws)
        try:
            time.sleep(3)
            import s3fs

            s3fs.S3FileSystem(skip_instance_cache=True).mkdir("lake")
            local = {**os.environ, "GRAPHLAKE_HOME": str(scratch / "local"), "DAGSTER_HOME": str(scratch / "local-dagster")}
            remote = {**os.environ, "GRAPHLAKE_HOME": "s3://lake/bench", "GRAPHLAKE_CACHE": str(scratch / "cache"), "DAGSTER_HOME": str(scratch / "s3-dagster")}
            seconds = {"local disk": timed([GRAPHLAKE, "demo"], local), "S3 (moto, loopback)": timed([GRAPHLAKE, "demo"], remote)}
            from graphlake.warehouse.object_store import ObjectStore, cache_for

            started = time.perf_counter()
            count = sum(map(len, rows(cache_for("s3://lake/bench", scratch / "empty-cache"), ["demo"]).values()))
            read_s = time.perf_counter() - started
            objects = len(ObjectStore("s3://lake/bench").fs.find("lake/bench"))
        finally:
            server.terminate()
    base = seconds["local disk"]
    lines = ["| lake | `graphlake demo` (s) | ratio |", "|---|---:|---:|"]
    lines += [f"| {name} | {value:.1f} | {value / base:.2f} |" for name, value in seconds.items()]
    lines += ["", f"Every table of the demo ({count} rows) read from an empty cache: {read_s:.1f} s; {objects} objects on the store."]
    print("\n".join(lines))
    text = [*header("A lake on object storage: the demo on local disk and on S3", "python benchmarks/s3_lake.py"), "", *lines]
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text("\n".join(text) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
