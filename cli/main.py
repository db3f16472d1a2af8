"""The ``graphlake`` console script. A command that only read the lake and printed its answer ends its
process at once instead of tearing the interpreter down: on a fresh ``graphlake query`` the teardown's
garbage-collection passes over the models' and kernels' objects cost 0.3-0.4 CPU-s, a fifth of the
whole command, for memory the operating system takes back anyway (Instagram's servers end their
workers the same way). The atexit handlers still run and the output is flushed; a command that wrote,
failed, or left a thread of its own running ends the ordinary way."""

from __future__ import annotations

import atexit
import os
import sys
import threading

from graphlake.cli import app
from graphlake.cli.app import ENDING


def main() -> None:
    try:
        app()
    except SystemExit as end:
        if end.code in (None, 0) and ENDING["read_only"] and _only_daemon_threads():
            _end_now()
        raise


def _only_daemon_threads() -> bool:
    return all(thread.daemon for thread in threading.enumerate() if thread is not threading.main_thread())


def _end_now() -> None:
    atexit._run_exitfuncs()  # noqa: SLF001  (what the interpreter runs first at exit: logging's flush, the libraries' own)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # the reader went away (`| head`): nothing left to say to it
        os._exit(1)
    os._exit(0)
