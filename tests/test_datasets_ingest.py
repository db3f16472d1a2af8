"""The real benchmark sets through the command line, checked against the counts their SOURCE.md gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphlake.cli import app

pytestmark = pytest.mark.datasets


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(autouse=True)
def _env(lake, monkeypatch):
    monkeypatch.setenv("GRAPHLAKE_HOME", str(lake))
    monkeypatch.setenv("DAGSTER_HOME", str(lake / "dagster"))


def ingest(fmt: str, path: Path, corpus: str) -> None:
    if not path.exists():
        pytest.skip(f"{path} not staged")
    result = CliRunner().invoke(app, ["ingest", fmt, str(path), "--corpus", corpus], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def sql(query: str) -> list[dict]:
    result = CliRunner().invoke(app, ["sql", query, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def scalar(query: str):
    [row] = sql(query)
    [value] = row.values()
    return value


def test_scifact_beir(datasets_dir):
    ingest("beir", datasets_dir / "scifact", "scifact")
    assert scalar("select count(*) from documents where corpus = 'scifact'") == 5183
    assert scalar("select count(*) from queries where corpus = 'scifact' and split = 'test'") == 300
    assert scalar("select count(*) from qrels where corpus = 'scifact' and split = 'test'") == 339
    assert scalar("select count(*) from qrels where corpus = 'scifact' and split = 'train'") == 919
    assert scalar("select count(*) from nodes where corpus = 'scifact'") == 5183


def test_hotpotqa_ircot_dev(datasets_dir):
    ingest("hotpotqa-ircot", datasets_dir / "hotpotqa/ircot/processed_data/hotpotqa/dev_subsampled.jsonl.gz", "hotpotqa")
    assert scalar("select count(*) from queries where corpus = 'hotpotqa' and split = 'dev'") == 500
    assert scalar("select count(*) from qrels where corpus = 'hotpotqa'") == 1000
    assert scalar("select count(*) from nodes where corpus = 'hotpotqa'") == 4858
    assert scalar("select count(distinct (title, text)) from documents where corpus = 'hotpotqa'") == 4858


def test_spider_tables_foreign_keys_and_gold(datasets_dir):
    ingest("spider", datasets_dir / "spider", "spider")
    assert scalar("select count(*) from documents where corpus = 'spider'") == 876
    assert scalar("select count(distinct metadata->>'db_id') from documents where corpus = 'spider'") == 166
    assert scalar("select count(*) from foreign_keys where corpus = 'spider'") == 849
    assert scalar("select count(*) from queries where corpus = 'spider' and split = 'dev'") == 1034
    assert scalar("select count(*) from queries q where corpus = 'spider' and not exists (select 1 from qrels r where r.corpus = q.corpus and r.query_id = q.query_id)") == 0


def test_2wiki_dev_skips_questions_without_context(datasets_dir):
    ingest("2wiki", datasets_dir / "2wikimultihopqa/migres/data/wikihop.json.gz", "2wiki-dev")
    assert scalar("select count(*) from queries where corpus = '2wiki-dev'") == 164
    assert scalar("select count(*) from documents where corpus = '2wiki-dev'") == 1294
