"""Commands that build: materialize assets, the reindex schedule, the Dagster UI."""

from __future__ import annotations

import os
import subprocess
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from graphlake.cli.app import app, console, fail, print_summary, run_assets
from graphlake.common.settings import HOME
from graphlake.warehouse.home import lake_home


@app.command()
def materialize(
    corpus: Annotated[str, typer.Option(help="Corpus (partition) to materialize.")],
    select: Annotated[str | None, typer.Option(help="Dagster asset selection, e.g. 'nodes+' or 'group:ingest'.")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML run config, as in the Dagster launchpad: ops: {reranker: {config: {...}}}.")] = None,
) -> None:
    """Materialize assets (all by default) for one declared corpus."""
    run_assets(corpus, select, config, "materialize", incremental=select is None)  # a build: only what changed reaches
    print_summary(corpus)


class Switch(str, Enum):
    on = "on"
    off = "off"
    status = "status"


@app.command()
def schedule(action: Annotated[Switch, typer.Argument(help="on, off, or status.")] = Switch.status) -> None:
    """Turn the reindex schedule and the change sensor on or off together, or show them. They tick
    while a Dagster daemon runs for the lake (`graphlake ui` starts one)."""
    from graphlake.pipelines.reindex import switch, switches

    home = lake_home()
    if action is not Switch.status:
        try:
            switch(home, action is Switch.on)
        except RuntimeError as error:
            fail(str(error))
    table = Table("instigator", "kind", "state", "when")
    for name, (kind, state, when) in switches(home).items():
        table.add_row(name, kind, state, when)
    console.print(table)


@app.command()
def ui(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port on loopback.")] = 3000,
) -> None:
    """Serve the Dagster UI (and its daemon, for the reindex sensor) on 127.0.0.1."""
    from graphlake.pipelines.dagster_home import DEFINITIONS_MODULE, dagster_command, prepare_dagster_home

    home = lake_home()
    dagster_home = prepare_dagster_home(home)
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), HOME.name: str(home)}
    # Dagster advises its own projects to move to `dg dev`; the lake is not one, and the advice is noise here
    quiet = "ignore:Function `dev_command` is superseded"
    env["PYTHONWARNINGS"] = ",".join(filter(None, (os.environ.get("PYTHONWARNINGS"), quiet)))
    command = [dagster_command(), "dev", "-m", DEFINITIONS_MODULE, "-h", "127.0.0.1", "-p", str(port)]
    # run inside DAGSTER_HOME: Dagster warns about any other dagster.yaml in its working folder
    raise typer.Exit(_serve(command, env, dagster_home))


def _serve(command: list[str], env: dict, cwd: Path) -> int:
    """Run ``dagster dev`` until it ends or this process is asked to stop (SIGTERM, SIGINT); then stop it
    and every process it started (webserver, daemon, code servers), so none outlives ``graphlake ui``."""
    import signal
    import time

    import psutil

    process = subprocess.Popen(command, env=env, cwd=cwd, start_new_session=True)  # our signal handlers decide
    asked: list[int] = []
    handlers = {number: signal.signal(number, lambda received, _frame: asked.append(received)) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        while process.poll() is None and not asked:
            time.sleep(0.2)
    finally:
        try:
            tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # dagster dev stops its own children first
        _, alive = psutil.wait_procs(tree, timeout=20)
        for survivor in alive:
            survivor.kill()
        psutil.wait_procs(alive, timeout=5)
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return 0 if asked else process.returncode
