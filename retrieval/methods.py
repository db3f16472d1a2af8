"""Methods: trees of registered operators declared as data, parsed once.

A method is written in YAML as ``{op: name, ...params}``; ``inputs`` name other methods or hold
inline operators, and are resolved to operator objects when the methods are parsed, so running one
needs nothing but the query and the corpus's indexes.

Every packaged method lives in one catalogue, ``retrieval/catalogues/<name>.yaml`` (the baselines
and one per paper, each method with an ``about`` line). A lake *switches on* the methods it runs:
the project's ``retrieval/methods.yaml`` names the default ones under ``use``; the lake's own
``methods.yaml`` adds to them (``use: [grapher/*, grasp_static]``) and declares methods of its own,
or overrides packaged ones by name, which switches those on too.
A ``use`` entry is a method, a pattern (``ap_*_kg``) or a catalogue's methods (``grapher/*``).
Only switched-on methods get run and evaluation assets; any available method may be an input.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from graphlake.common.suggest import did_you_mean
from graphlake.retrieval import operators  # noqa: F401  (the operators register themselves: @register)
from graphlake.retrieval.core import METHOD_NAME, MethodError, Methods, Op, parse_operator
from graphlake.retrieval.operators.vector import share_widest
from graphlake.warehouse.config_files import ConfigFileError, key_line, load_mapping

DEFAULT_METHODS = Path(str(files("graphlake.retrieval") / "methods.yaml"))
CATALOGUES = Path(str(files("graphlake.retrieval") / "catalogues"))
USE = "use"  # the key that switches packaged methods on
CATALOGUE_LIST = "catalogues"  # retrieval/methods.yaml's list of the catalogue files, in display order
ABOUT = "about"  # a method's one-line description, not a parameter


@dataclass(frozen=True)
class Declared:
    """Where a method is declared and what it is, for ``graphlake methods`` and error messages."""

    name: str
    spec: dict[str, Any]  # its operator and parameters, ``about`` left out
    about: str
    paper: str  # its catalogue's paper ("Baselines" for the first stages), or "this lake"
    catalogue: str | None  # the catalogue's name; None for the lake's own
    source: Path


def catalogues() -> dict[str, dict[str, Declared]]:
    """Every packaged catalogue, in the order ``retrieval/methods.yaml`` lists them: its name -> its
    methods. A method name is declared in one catalogue only."""
    return {name: dict(methods) for name, methods in _packaged().items()}


@functools.cache
def _packaged() -> dict[str, dict[str, Declared]]:
    """The packaged catalogues, parsed once a process: they are the installed package's files (a
    rebuild's plan asks for the methods a dozen times)."""
    listed = load_mapping(DEFAULT_METHODS).get(CATALOGUE_LIST)
    if not isinstance(listed, list) or not all(isinstance(name, str) for name in listed):
        raise ConfigFileError(f"{key_line(DEFAULT_METHODS, CATALOGUE_LIST)}: `{CATALOGUE_LIST}` lists the files of {CATALOGUES}")
    found: dict[str, dict[str, Declared]] = {}
    owner: dict[str, Path] = {}
    for stem in listed:
        path = CATALOGUES / f"{stem}.yaml"
        content = load_mapping(path)
        paper, methods = content.get("paper"), content.get("methods")
        if not isinstance(paper, str) or not isinstance(methods, Mapping):
            raise ConfigFileError(f"{path}: a catalogue is `paper: <title>` and `methods: {{name: {{op: ...}}}}`")
        found[stem] = {}
        for name, spec in methods.items():
            if name in owner:
                raise ConfigFileError(f"{key_line(path, 'methods', name)}: method {name!r} is declared in {owner[name].name} too")
            owner[name] = path
            found[stem][name] = _declared(name, spec, paper, stem, path)
    return found


def available_methods(home: Path | None = None, override: Path | None = None) -> tuple[dict[str, Declared], list[str]]:
    """Every method a lake may use (packaged, then its own, which override by name) and the names it
    switches on, in catalogue order. ``override``: read the lake's methods from this file instead."""
    packaged = catalogues()
    declared = _by_name(packaged)
    switched = _uses(load_mapping(DEFAULT_METHODS), DEFAULT_METHODS, packaged, declared)
    override = override or (Path(home) / "methods.yaml" if home is not None else None)
    if override is not None and override.is_file():
        content = load_mapping(override)
        switched += _uses(content, override, packaged, declared)
        for name, spec in content.items():
            if name != USE:
                declared[name] = _declared(name, spec, "this lake", None, override)
                switched.append(name)
    order = {name: index for index, name in enumerate(declared)}
    return declared, sorted(set(switched), key=order.__getitem__)


def load_methods(home: Path | None = None) -> Methods:
    """The lake's switched-on methods, able to resolve any available one (none: the project's defaults)."""
    declared, switched = available_methods(home)
    try:
        parsed = parse_methods({name: item.spec for name, item in declared.items()})
    except MethodError as error:
        item = declared.get(error.method or "")
        where = key_line(item.source, *(("methods",) if item.catalogue else ()), item.name) if item else DEFAULT_METHODS
        raise MethodError(f"{where}: {error}", error.method) from None
    return Methods({name: parsed[name] for name in switched}, parsed.declared, parsed)


def switch_on(home: Path, entry: str) -> list[str]:
    """Add ``entry`` (a method, a pattern, ``catalogue/*``) to the lake's ``use`` list, keeping the rest
    of its methods.yaml as written; the methods it newly switches on. Checked before the file is
    replaced (atomically), so a bad entry leaves the file as it was."""
    path = Path(home) / "methods.yaml"
    packaged = catalogues()
    _expand(entry, packaged, _by_name(packaged))
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    before = set(load_methods(home))
    content = load_mapping(path) if text else {}
    listed = content.get(USE, [])
    listed = [listed] if isinstance(listed, str) else list(listed) if isinstance(listed, list) else listed
    if not isinstance(listed, list):
        raise ConfigFileError(f"{key_line(path, USE)}: `{USE}` lists methods, patterns or catalogues")
    if entry in listed:
        return []
    flow = "[" + ", ".join(json.dumps(item) for item in [*listed, entry]) + "]"
    pair = next(((key, value) for key, value in yaml.compose(text).value if key.value == USE), None) if USE in content else None
    if pair is None:
        separator = "" if not text or text.endswith("\n") else "\n"
        text = f"{text}{separator}{USE}: {flow}\n"
    else:  # from the key on: a block list (``- x`` lines) ends where the next key starts, a flow one at its bracket
        rest = text[pair[1].end_mark.index :]
        text = text[: pair[0].end_mark.index] + f": {flow}" + ("" if rest.startswith(("\n", " ", "#")) or not rest else "\n") + rest
    candidate = path.with_name(f".methods.yaml.{uuid.uuid4().hex}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    candidate.write_text(text, encoding="utf-8")
    try:
        declared, switched = available_methods(home, candidate)
        parse_methods({name: item.spec for name, item in declared.items()})
        os.replace(candidate, path)
    finally:
        candidate.unlink(missing_ok=True)
    return [name for name in switched if name not in before]


def parse_methods(declared: Mapping[str, Any]) -> Methods:
    """Validate every method and resolve its inputs; errors name the method and the problem."""
    for name, spec in declared.items():
        if not isinstance(name, str) or not METHOD_NAME.fullmatch(name):
            raise MethodError(f"method {name!r}: a name is letters, digits and underscores (it names the method's Dagster assets)", name)
        if not isinstance(spec, Mapping) or "op" not in spec:
            raise MethodError(f"method {name!r}: expected a mapping with 'op', got {spec!r}", name)
    parsed: dict[str, Op] = {}

    def resolve(name: str, path: tuple[str, ...]) -> Op:
        if name not in parsed:
            if name not in declared:
                raise MethodError(f"method {path[-1]!r}: input {name!r} is not a declared method{did_you_mean(name, declared)}", path[-1])
            if name in path:
                raise MethodError(f"method {path[-1]!r}: inputs form a cycle through {name!r}")
            parsed[name] = parse_operator(declared[name], name, lambda item: resolve(item, (*path, name)))
        return parsed[name]

    for name in declared:
        resolve(name, ())
    share_widest(parsed.values())
    return Methods({name: parsed[name] for name in declared}, declared)


def unknown_method(name: str, methods: Methods) -> MethodError:
    """The error for a method name a lake does not run: not switched on (and how to), or unknown."""
    if name in methods.available:
        return MethodError(f"method {name!r} is not switched on in this lake: `graphlake methods --use {name}` adds it", name)
    return MethodError(f"unknown method {name!r} (`graphlake methods` lists them){did_you_mean(name, methods.available)}", name)


def _by_name(packaged: dict[str, dict[str, Declared]]) -> dict[str, Declared]:
    return {name: item for catalogue in packaged.values() for name, item in catalogue.items()}


def _declared(name: Any, spec: Any, paper: str, catalogue: str | None, source: Path) -> Declared:
    if not isinstance(spec, Mapping):
        raise MethodError(f"{key_line(source, *(('methods',) if catalogue else ()), str(name))}: method {name!r}: expected a mapping with 'op', got {spec!r}", str(name))
    about = spec.get(ABOUT, "")
    return Declared(str(name), {key: value for key, value in spec.items() if key != ABOUT}, str(about), paper, catalogue, source)


def _uses(content: Mapping[str, Any], path: Path, packaged: dict[str, dict[str, Declared]], declared: Mapping[str, Declared]) -> list[str]:
    """The method names a ``use`` list switches on."""
    entries = content.get(USE, [])
    if isinstance(entries, str):
        entries = [entries]
    if not isinstance(entries, list) or not all(isinstance(entry, str) for entry in entries):
        raise ConfigFileError(f"{key_line(path, USE)}: `{USE}` lists methods, patterns or catalogues, e.g. `{USE}: [grapher/*, grasp_static]`")
    try:
        return [name for entry in entries for name in _expand(entry, packaged, declared)]
    except MethodError as error:
        raise ConfigFileError(f"{key_line(path, USE)}: `{USE}` names {error}") from None


def _expand(entry: str, packaged: dict[str, dict[str, Declared]], declared: Mapping[str, Declared]) -> list[str]:
    """The packaged methods ``entry`` names: a method (``grasp_static``), a pattern (``ap_*_kg``), or a
    catalogue's methods (``grapher/*``, ``grasp/grasp_*``)."""
    catalogue, _, pattern = entry.rpartition("/")
    if catalogue and catalogue not in packaged:
        raise MethodError(f"catalogue {catalogue!r}, which does not exist (they are {', '.join(packaged)}){did_you_mean(catalogue, packaged)}")
    names = packaged[catalogue] if catalogue else declared
    matched = fnmatch.filter(names, pattern)
    if not matched:
        raise MethodError(f"{entry!r}, which matches no packaged method (`graphlake methods` lists them){did_you_mean(pattern, names)}")
    return matched
