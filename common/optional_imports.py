"""Importing a library without the optional packages it would load and the lake never uses through it.

spaCy's thinc imports torch to offer torch-backed layers (the small English pipeline has none), and
LightGBM imports scikit-learn, pandas and Dask for APIs beside the ``Booster`` the lake uses. In a fresh
query's process those imports are most of its time (graphlake_ltr: 1.9 s of torch and sklearn on 2
cores). Where a hidden package is not loaded yet it reads as missing during the import alone, so the
library takes its documented without-it path; it imports as usual afterwards.
"""

from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType

_importing = threading.Lock()


def import_without(name: str, hidden: tuple[str, ...]) -> ModuleType:
    """``import name`` with those of ``hidden`` not loaded yet reported missing while it loads. One import
    at a time: a server's threads asking at once would otherwise see the module half made."""
    with _importing:
        if name in sys.modules:
            return importlib.import_module(name)  # finished, or waits for whoever is importing it
        absent = [package for package in hidden if package not in sys.modules]
        for package in absent:
            sys.modules[package] = None  # type: ignore[assignment]  # an import of it raises ImportError
        try:
            return importlib.import_module(name)
        finally:
            for package in absent:
                del sys.modules[package]
