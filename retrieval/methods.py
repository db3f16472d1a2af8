"""Methods: trees of registered operators declared as data (``methods.yaml``, package data), parsed once.

A method is written in YAML as ``{op: name, ...params}``; ``inputs`` name other methods or hold
inline operators, and are resolved to operator objects when the methods are parsed, so running one
needs nothing but the query and the corpus's indexes. A lake's own ``methods.yaml`` overrides and
extends the project's.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

from graphlake.retrieval import operators  # noqa: F401  (the operator modules register themselves)
from graphlake.retrieval.core import METHOD_NAME, MethodError, Methods, Op, parse_operator
from graphlake.warehouse.config_files import key_line, load_mapping

DEFAULT_METHODS = Path(str(files("graphlake.retrieval") / "methods.yaml"))


def parse_methods(declared: Mapping[str, Any]) -> Methods:
    """Validate every method and resolve its inputs; errors name the method and the problem."""
    for name, spec in declared.items():
        if not isinstance(name, str) or not METHOD_NAME.fullmatch(name):
            raise MethodError(f"method {name!r}: a name is letters, digits and underscores (it names the method's Dagster assets)")
        if not isinstance(spec, Mapping) or "op" not in spec:
            raise MethodError(f"method {name!r}: expected a mapping with 'op', got {spec!r}")
    parsed: dict[str, Op] = {}

    def resolve(name: str, path: tuple[str, ...]) -> Op:
        if name not in parsed:
            if name not in declared:
                raise MethodError(f"method {path[-1]!r}: input {name!r} is not a declared method")
            if name in path:
                raise MethodError(f"method {path[-1]!r}: inputs form a cycle through {name!r}")
            parsed[name] = parse_operator(declared[name], name, lambda item: resolve(item, (*path, name)))
        return parsed[name]

    for name in declared:
        resolve(name, ())
    return Methods({name: parsed[name] for name in declared}, declared)


def load_methods(home: Path | None = None) -> Methods:
    """The project's methods, overridden and extended by the lake's ``methods.yaml`` (none: the project's alone)."""
    declared = load_mapping(DEFAULT_METHODS)
    override = Path(home) / "methods.yaml" if home is not None else None
    overrides = load_mapping(override) if override is not None and override.is_file() else {}
    try:
        return parse_methods(declared | overrides)
    except MethodError as error:
        source = override if error.method in overrides else DEFAULT_METHODS
        raise MethodError(f"{key_line(source, error.method) if error.method else source}: {error}", error.method) from None
