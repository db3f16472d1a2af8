"""A build yields the CPU to searches (``common/priority.py``): a Dagster run of the lake's assets runs
at ``GRAPHLAKE_BUILD_NICE``, and so do the threads it starts; a process is never raised back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

RUN = textwrap.dedent(
    """
    import json, os, sys, threading
    from dagster import asset, materialize
    from graphlake.warehouse.io_manager import LakeResource

    seen = {}

    @asset
    def probe(lake: LakeResource) -> None:
        seen["run"] = os.getpriority(os.PRIO_PROCESS, 0)
        worker = threading.Thread(target=lambda: seen.update(thread=os.getpriority(os.PRIO_PROCESS, 0)))
        worker.start()
        worker.join()

    assert materialize([probe], resources={"lake": LakeResource(home=sys.argv[1])}).success
    print(json.dumps(seen))
    """
)


def test_a_build_runs_below_the_searches(tmp_path):
    def run(nice: str, start: int = 0) -> dict:
        command = [sys.executable, "-c", RUN, str(tmp_path)]
        done = subprocess.run(["nice", "-n", str(start), *command], capture_output=True, text=True, env={**_environ(), "GRAPHLAKE_BUILD_NICE": nice, "DAGSTER_HOME": str(tmp_path)})
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert run("7") == {"run": 7, "thread": 7}  # the run and a thread it starts
    assert run("0") == {"run": 0, "thread": 0}  # switched off
    assert run("3", start=12) == {"run": 12, "thread": 12}  # started lower already: left there


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GRAPHLAKE_")}
