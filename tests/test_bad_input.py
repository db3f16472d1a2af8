"""Bad configuration and bad input end in one clear line naming the file, line or option, break only
the commands that need what is bad, and change nothing: real ``graphlake`` processes where the
message is the point (what a user sees, traceback or not), the in-process runner where it is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphlake.cli import app
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec

GRAPHLAKE = str(Path(sys.executable).with_name("graphlake"))


def cli(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    variables = {**os.environ, "GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), **env}
    return subprocess.run([GRAPHLAKE, *args], env=variables, capture_output=True, text=True, timeout=300)


def one_line_error(done: subprocess.CompletedProcess, *expected: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: ") and all(part in done.stderr for part in expected), done.stderr


def test_a_broken_methods_yaml_breaks_only_the_commands_that_read_it(tmp_path):
    (tmp_path / "methods.yaml").write_text("rrf: {op: rrf, inputs: [bm25, dense]\nbm25: {op: bm25}\n")
    for args in (["sql", "select 1"], ["corpora"], ["--help"]):
        assert cli(tmp_path, *args).returncode == 0, args
    one_line_error(cli(tmp_path, "query", "--corpus", "demo", "--method", "bm25", "sled"), f"{tmp_path / 'methods.yaml'}:2:1: ")
    one_line_error(cli(tmp_path, "materialize", "--corpus", "demo"), "methods.yaml:2:1: ")
    (tmp_path / "methods.yaml").write_text("bm25: {op: bm25}\nmine: {op: nope}\n")
    one_line_error(cli(tmp_path, "eval", "--corpus", "demo"), "methods.yaml:2: method 'mine': unknown operator 'nope'")


def test_a_broken_corpora_yaml_is_named_with_its_line_and_sql_still_works(tmp_path):
    (tmp_path / "corpora.yaml").write_text("corpora:\n  mine: {format: jsonl, path: /x\n")
    assert cli(tmp_path, "sql", "select 1").returncode == 0
    one_line_error(cli(tmp_path, "corpora"), f"{tmp_path / 'corpora.yaml'}:3:1: ")
    (tmp_path / "corpora.yaml").write_text("corpora:\n  other: {format: jsonl, path: /y}\n  mine: {format: nope, path: /x}\n")
    one_line_error(cli(tmp_path, "corpora"), "corpora.yaml:3: corpus 'mine': unknown format 'nope'")


def test_a_failed_ingest_leaves_corpora_yaml_byte_identical(tmp_path):
    from graphlake.warehouse.locks import writer_lock

    first = tmp_path / "first.jsonl"
    first.write_text(json.dumps({"id": "a", "title": "A", "text": "alpha"}) + "\n")
    CorpusRegistry(tmp_path).add(CorpusSpec(name="mine", format="jsonl", path=str(first)))
    (tmp_path / "corpora.yaml").write_text("# my corpora\n" + (tmp_path / "corpora.yaml").read_text())  # a hand-kept file
    before = (tmp_path / "corpora.yaml").read_bytes()
    second = tmp_path / "second.jsonl"
    second.write_text(json.dumps({"id": "b", "title": "B", "text": "beta"}) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "b", "title": "B", "text": "beta"}) + "\n{not json\n")
    one_line_error(cli(tmp_path, "ingest", "jsonl", str(bad), "--corpus", "mine"), f"{bad}:2: malformed JSON")
    with writer_lock(tmp_path, "mine", "a test holding the corpus"):  # the run itself fails, after the new path was declared for it
        one_line_error(cli(tmp_path, "ingest", "jsonl", str(second), "--corpus", "mine", GRAPHLAKE_LOCK_WAIT="0"), "is being written by")
    assert (tmp_path / "corpora.yaml").read_bytes() == before


def test_a_declaration_for_a_run_is_withdrawn_when_the_run_fails(tmp_path):
    registry = CorpusRegistry(tmp_path)
    registry.add(CorpusSpec(name="kept", format="jsonl", path="/k"))
    before = registry.path.read_bytes()
    with pytest.raises(RuntimeError), registry.declaring(CorpusSpec(name="mine", format="jsonl", path="/m")):
        assert registry.get("mine").path == "/m"
        raise RuntimeError("the run failed")
    assert registry.path.read_bytes() == before
    with pytest.raises(RuntimeError), registry.declaring(CorpusSpec(name="mine", format="jsonl", path="/m")):
        registry.add(CorpusSpec(name="other", format="jsonl", path="/o"))  # declared meanwhile: kept
        raise RuntimeError("the run failed")
    assert set(registry.all()) == {"demo", "kept", "other"}


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["query", "--corpus", "demo", "--method", "bm25", "--top", "0", "x"], "--top"),
        (["query", "--corpus", "demo", "--method", "bm25", "--top", "-3", "x"], "--top"),
        (["query", "--corpus", "demo", "--method", "bm25", "--top", "ten", "x"], "--top"),
        (["eval", "--corpus", "demo", "--sample", "0"], "--sample"),
        (["ingest", "jsonl", "x.jsonl", "--corpus", "c", "--chunk-size", "0"], "--chunk-size"),
        (["ingest", "jsonl", "x.jsonl", "--corpus", "c", "--chunk-overlap", "-1"], "--chunk-overlap"),
        (["ui", "--port", "0"], "--port"),
    ],
)
def test_out_of_range_and_non_numeric_options_are_refused_naming_the_option(args, option, lake):
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and f"Invalid value for '{option}'" in refused.output


def test_input_that_is_not_a_list_of_records_or_has_a_huge_line_names_the_file(tmp_path):
    record = tmp_path / "dict.json"
    record.write_text(json.dumps({"question": "not a list"}))
    one_line_error(cli(tmp_path, "ingest", "hotpotqa", str(record), "--corpus", "c"), f"{record}: no documents found: is it a hotpotqa corpus")
    huge = tmp_path / "huge.jsonl"
    huge.write_text(json.dumps({"id": "a", "title": "t", "text": "short"}) + "\n" + json.dumps({"id": "b", "title": "t", "text": "x" * 5000}) + "\n")
    one_line_error(cli(tmp_path, "ingest", "jsonl", str(huge), "--corpus", "c", GRAPHLAKE_MAX_LINE_BYTES="1000"), f"{huge}:2: line longer than 1,000 bytes")
    assert not (tmp_path / "corpora.yaml").exists()


def test_each_input_the_probe_found_fails_in_one_line_and_writes_nothing(tmp_path):
    """An alias bomb in methods.yaml, JSON nested past the parser, a text longer than spaCy takes, a bad
    corpus name, an overlap past the chunk size, NaN for a number, an impossible home folder."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    (tmp_path / "methods.yaml").write_text(bomb)
    one_line_error(cli(tmp_path, "query", "--corpus", "demo", "--method", "bm25", "sled"), f"{tmp_path / 'methods.yaml'}:2:", "aliases (*name) are not allowed")
    (tmp_path / "methods.yaml").unlink()
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"id": "a", "title": "", "text": ' + "[" * 5000 + "]" * 5000 + "}\n")
    one_line_error(cli(tmp_path, "ingest", "jsonl", str(deep), "--corpus", "c"), f"{deep}:1: JSON nested deeper than the parser reads")
    long = tmp_path / "long.jsonl"  # (a folder of files splits such a file into parts instead: test_readers_basic.py)
    long.write_text(json.dumps({"id": "book", "title": "", "text": "word " * 10_000_001}) + "\n")  # 50,000,005 characters
    one_line_error(cli(tmp_path, "ingest", "jsonl", str(long), "--corpus", "c", GRAPHLAKE_MAX_LINE_BYTES="60000000"), "long.jsonl:1", "50,000,005 characters, more than the 50,000,000")
    fine = tmp_path / "fine.jsonl"
    fine.write_text(json.dumps({"id": "a", "title": "", "text": "alpha"}) + "\n")
    one_line_error(cli(tmp_path, "ingest", "jsonl", str(fine), "--corpus", "bad name!"), "corpus name 'bad name!': letters, digits")
    one_line_error(cli(tmp_path, "ingest", "jsonl", str(fine), "--corpus", "c", "--chunk-size", "10", "--chunk-overlap", "20"), "chunk overlap 20 must be smaller than chunk size 10")
    one_line_error(cli(tmp_path, "ingest", "jsonl", str(fine), "--corpus", "c", GRAPHLAKE_LOCK_WAIT="nan"), "GRAPHLAKE_LOCK_WAIT='nan' is not a finite number")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("alpha")
    one_line_error(cli(tmp_path, "ingest", "files", str(notes), "--corpus", "c", "--encoding", "nonsense"), "encoding: unknown encoding 'nonsense'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.jsonl", "fine.jsonl", "long.jsonl", "notes"]  # nothing written, not even a lake
    one_line_error(cli(fine, "sql", "select 1"), f"GRAPHLAKE_HOME='{fine}': cannot make the lake's folder {fine}: File exists")


def test_a_full_disk_fails_in_one_line(tmp_path):
    """The lake on a nearly full filesystem (a 3 MB tmpfs, which needs root): whichever write meets the
    full disk, Dagster's own storage included, the command ends in one line."""
    full = tmp_path / "full"
    full.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(full)], capture_output=True).returncode != 0:
        pytest.skip("a small filesystem cannot be mounted here (needs root and the mount capability)")
    try:
        free = os.statvfs(full).f_bavail * os.statvfs(full).f_frsize
        (full / "filler").write_bytes(b"\0" * (free - 40 * 1024))
        fine = tmp_path / "fine.jsonl"
        fine.write_text(json.dumps({"id": "a", "title": "", "text": "alpha"}) + "\n")
        done = cli(full / "lake", "ingest", "jsonl", str(fine), "--corpus", "c")
        one_line_error(done)
        assert "full" in done.stderr or "No space left" in done.stderr, done.stderr
    finally:
        subprocess.run(["umount", str(full)], check=True)
