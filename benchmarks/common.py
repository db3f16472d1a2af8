"""What every benchmark script shares: driving the ``graphlake`` CLI and describing the machine."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("GRAPHLAKE_DATASETS", ROOT.parent / "shared" / "datasets"))


def graphlake(*args: str) -> str:
    """Run the project's ``graphlake`` command (the venv beside this interpreter); its stdout."""
    command = [str(Path(sys.executable).with_name("graphlake")), *args]
    print("$ graphlake " + " ".join(args), file=sys.stderr, flush=True)
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), "?")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores, {memory:.0f} GiB RAM, Python {platform.python_version()}"


def header(title: str, command: str) -> list[str]:
    """The opening lines of a results file: what, when, where, how to reproduce."""
    return [f"# {title}", "", f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC", f"- machine: {machine()}", f"- command: `{command}`"]
