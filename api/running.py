"""The work a server runs now, each piece under a ``Stop`` (``common/stopping.py``): a deadline (the
request's ``timeout_s``, never more than ``$GRAPHLAKE_SERVE_DEADLINE_S``), called off when its client
disconnects, and all of them called off when the server shuts down.

A search runs in a worker thread while the event loop waits on the connection: the ASGI ``receive``
answers ``http.disconnect`` once the client has gone, which calls the work off at its next stage."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
from starlette.requests import Request

from graphlake.api.results import RequestError
from graphlake.common.settings import SERVE_DEADLINE_S
from graphlake.common.stopping import Stop

T = TypeVar("T")


class Running:
    """The stops of the requests running now."""

    def __init__(self) -> None:
        self._stops: set[Stop] = set()
        self._lock = threading.Lock()

    async def stoppable(self, http: Request, seconds: float | None, work: Callable[[Stop], T]) -> T:
        """``work(stop)`` in a worker thread, its stop due in ``seconds`` (the server's deadline when None)
        and called off when the client disconnects; ``RequestError`` when ``seconds`` is over the server's."""
        limit = SERVE_DEADLINE_S.number()
        if seconds is not None and seconds > limit:
            raise RequestError(f"timeout_s: at most the server's deadline of {limit:g} s ({SERVE_DEADLINE_S.name}), got {seconds:g}")
        stop = Stop.within(seconds or limit)

        async def watch() -> None:
            while (await http.receive())["type"] != "http.disconnect":
                pass
            stop.call_off("disconnected")

        with self._lock:
            self._stops.add(stop)
        failed: Exception | None = None
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(watch)
                try:
                    done = await anyio.to_thread.run_sync(work, stop)
                except Exception as error:  # raised past the group, or the group would wrap it in an ExceptionGroup
                    failed = error
                finally:
                    group.cancel_scope.cancel()
        finally:
            with self._lock:
                self._stops.discard(stop)
        if failed is not None:
            raise failed
        return done

    def call_off(self) -> int:
        """Call off every running request (the server is shutting down); how many there were."""
        with self._lock:
            stops = list(self._stops)
        for stop in stops:
            stop.call_off("shutdown")
        return len(stops)
