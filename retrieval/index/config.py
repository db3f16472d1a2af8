"""What opening a corpus's indexes depends on beside the lake, resolved once where a lake is opened
(the searcher manager, a run, a build step) and handed down: where the models are unpacked, and
which device searches the hybrid graph and runs the cross-encoder. Nothing below this reads the
environment (Dagster's resources, resolved once, are the anchor)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from graphlake.common import settings

LOG = logging.getLogger("graphlake")


class DeviceError(RuntimeError):
    """``GRAPHLAKE_DEVICE=cuda`` where CUDA cannot serve: no device, or a kernel that cannot hold an index."""


@dataclass(frozen=True)
class IndexConfig:
    """``device``: ``cpu`` or ``cuda``, as resolved; ``asked``: what was asked (``auto``, ``cpu``,
    ``cuda``), since only an explicit ``cuda`` makes a CUDA searcher that cannot run an error;
    ``why``: the reason for the device, said once when ``auto`` chose."""

    model_cache: Path
    device: str = "cpu"
    asked: str = "auto"
    why: str = "asked for"

    @classmethod
    def resolve(cls) -> IndexConfig:
        """From the settings (``common/settings.py``), the device probed once for ``auto``."""
        return _probe(settings.model_cache(), settings.device(), settings.cuda_simulated())


@cache  # once per process and settings: the probe imports numba's CUDA target where a device can be
def _probe(model_cache: Path, asked: str, simulated: bool) -> IndexConfig:
    if asked == "cpu":
        return IndexConfig(model_cache, "cpu", asked)
    from graphlake.kernels.hybrid.cuda_probe import cuda_possible

    present = False
    if cuda_possible(simulated):  # numba's CUDA target is imported only where a device can be
        from graphlake.kernels.hybrid.cuda_search import cuda_present

        present = cuda_present()
    if asked == "cuda" and not present:
        raise DeviceError(f"{settings.DEVICE.name}=cuda, but numba sees no CUDA device here; set it to auto or cpu")
    if asked == "cuda":
        return IndexConfig(model_cache, "cuda", asked)
    chosen = IndexConfig(model_cache, "cuda" if present else "cpu", asked, "numba sees a CUDA device" if present else "no CUDA device here")
    LOG.info("%s=auto: searching on %s (%s)", settings.DEVICE.name, chosen.device, chosen.why)
    return chosen
