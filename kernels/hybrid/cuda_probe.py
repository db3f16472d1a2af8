"""Whether a CUDA device can be here at all, answered without importing numba's CUDA target (a quarter
of a CPU-second of every fresh query on a machine that has none): numba's simulator is asked for
(``simulated``: ``NUMBA_ENABLE_CUDASIM=1``, as ``common/settings.py`` reads it), or the NVIDIA driver is installed. Where it can, ``cuda_search.cuda_present``
asks numba itself."""

from __future__ import annotations

import ctypes.util
import os
from functools import cache


@cache
def cuda_possible(simulated: bool) -> bool:
    return simulated or os.path.exists("/dev/nvidiactl") or ctypes.util.find_library("cuda") is not None
