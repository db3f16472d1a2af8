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

    base = os.getpriority(os.PRIO_PROCESS, 0)  # this test process may run lower already (a build ran in it)
    wanted, lower = min(19, base + 3), min(19, base + 12)
    assert run(str(wanted)) == {"run": wanted, "thread": wanted}  # the run and a thread it starts
    assert run("0") == {"run": base, "thread": base}  # switched off
    assert run(str(wanted), start=12) == {"run": lower, "thread": lower}  # started lower already: left there


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GRAPHLAKE_")}
