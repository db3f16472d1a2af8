"""A build yields the CPU to searches: it runs at a lower priority (``GRAPHLAKE_BUILD_NICE``), as a
search engine throttles its merges, so that a fold or a reindex on the machine a server runs on takes
the cores the searches leave rather than half of them. Linux keeps a priority per thread and a thread
inherits its creator's: set where a run starts, it holds for the encoders' and the executor's threads
made after it. An unprivileged process cannot raise its priority back, so a process that runs a build
in itself (a notebook materializing in process) keeps it afterwards: set ``GRAPHLAKE_BUILD_NICE=0``
there."""

from __future__ import annotations

import os

from graphlake.common.settings import BUILD_NICE


def yield_to_searches() -> int:
    """Lower the calling thread to the build's priority (never raise it: an unprivileged process cannot
    go back); the nice value it runs at now."""
    wanted = int(BUILD_NICE.number())
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if wanted > current:
        os.setpriority(os.PRIO_PROCESS, 0, wanted)
    return max(wanted, current)
