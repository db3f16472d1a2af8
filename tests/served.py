"""A real ``graphlake serve`` process for the tests that talk to it over HTTP."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from conftest import free_port

KEY = "test-key-7f3a"  # the API key the shared demo server (conftest's ``served``) wants
REQUEST_MB = 230  # the memory one of its requests may hold: a full dense batch (201 MB estimated) fits, the longest SPLADE one (249) does not


class Server:
    """A ``graphlake serve`` process on a free loopback port; its output kept in a file."""

    def __init__(self, home: Path, log: Path, key: str | None = None, settings: dict[str, str] | None = None) -> None:
        self.port, self.log = free_port(), log
        env = {**os.environ, "GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), **(settings or {})}
        env.pop("GRAPHLAKE_API_KEY", None)
        env.update({"GRAPHLAKE_API_KEY": key} if key else {})
        command = [shutil.which("graphlake") or str(Path(sys.executable).parent / "graphlake"), "serve", "--port", str(self.port)]
        self.process = subprocess.Popen(command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while not self._up():
            assert self.process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.25)

    def _up(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> str:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return self.log.read_text(errors="replace")
