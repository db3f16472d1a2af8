"""Reading the lake's YAML files (corpora.yaml, methods.yaml, run configs) with errors a person can act
on: one line, ``file:line:column: problem``, and only for the commands that read that file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class ConfigFileError(ValueError):
    """A configuration file that cannot be used; the message names the file, and the line and column
    where it can."""


class _WithoutAliases(yaml.SafeLoader):
    """YAML without aliases: a kilobyte of nested ``*alias`` references expands into billions of
    values wherever the loaded file is walked (a methods.yaml "alias bomb" hung every query)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in graphlake's files: write the value out", self.peek_event().start_mark)
        return super().compose_node(parent, index)


def load_mapping(path: Path) -> dict[str, Any]:
    """The YAML mapping in ``path`` (empty for an empty file)."""
    loaded = load_yaml(path)
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigFileError(f"{path}:1:1: expected a mapping of names to settings, found {type(loaded).__name__}")
    return loaded


def load_yaml(path: Path) -> Any:
    """The YAML value in ``path``, aliases refused; a file it cannot use raises :class:`ConfigFileError` in one line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigFileError(f"{path}: cannot read it: {error}") from None
    try:
        loaded = yaml.load(text, Loader=_WithoutAliases)  # noqa: S506 (a SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigFileError(f"{where}: {error.problem or error.context or 'not valid YAML'}") from None
    except yaml.YAMLError as error:
        raise ConfigFileError(f"{path}: not valid YAML: {error}") from None
    return loaded


def key_line(path: Path, *keys: str) -> str:
    """``file:line`` of a nested key (``corpora``, ``mine``), or the file alone where it cannot be found."""
    try:
        node = yaml.compose(Path(path).read_text(encoding="utf-8"))
        for key in keys:
            node = next(value for name, value in node.value if name.value == key)
        return f"{path}:{node.start_mark.line + 1}"
    except (OSError, yaml.YAMLError, StopIteration, AttributeError, TypeError):
        return str(path)


def one_line(error: Exception) -> str:
    """A validation error (pydantic's spans lines) as one line."""
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return " ".join(str(error).split())
    parts = []
    for e in errors():
        message = str(e.get("ctx", {}).get("error") or e["msg"])  # a model's own ValueError, not pydantic's wrapping of it
        parts.append(f"{'.'.join(map(str, e['loc']))}: {message}" if e["loc"] else message)
    return " ".join("; ".join(parts).split())
