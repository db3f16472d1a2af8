"""The README's SQL examples return what the README says they return, on the lake `graphlake demo` builds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphlake.cli import app

README = Path(__file__).resolve().parents[1] / "docs" / "sql.md"  # the SQL examples the README points to
EXAMPLE = re.compile(r'```bash\n\.venv/bin/graphlake sql "(?P<query>[^"]+)"\n```\n```\n(?P<rows>(?:│.*\n)+)```')


def examples() -> list[tuple[str, list[list[str]]]]:
    found = []
    for match in EXAMPLE.finditer(README.read_text(encoding="utf-8")):
        rows = [[cell.strip() for cell in line.strip().strip("│").split("│")] for line in match["rows"].splitlines()]
        found.append((match["query"], rows))
    return found


def test_the_readme_has_sql_examples():
    assert len(examples()) >= 6


@pytest.mark.parametrize(("query", "expected"), examples())
def test_readme_sql_example(reads_demo, query, expected):
    result = CliRunner().invoke(app, ["sql", query, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = [[str(value) for value in row.values()] for row in json.loads(result.stdout)]
    assert rows == expected
