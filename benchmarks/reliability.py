"""Reliability probe: what kill -9, two writers, bad input and a faulty LLM server leave behind, for
two revisions side by side (``--before`` checked out, ``after`` = the working tree).

- **kills**: a small corpus is built, edited, and its re-materialization killed (-9) after each
  table or artefact it writes; after each kill the corpus must equal the previous or the next
  version as a whole, name no node outside its ``nodes``, and answer every method's query.
- **writers**: two ``materialize`` of one corpus at once must both end with exit 0 or a clear lock
  message (never a ``FileNotFoundError``) and leave what one run leaves.
- **bad input**: each case must exit non-zero with no traceback, name its file / option / line, and
  leave ``corpora.yaml`` byte-identical; the commands that do not need a broken file must work.
- **faulty LLM**: after a good LLM run, answers that are garbage, not JSON or 500 must not replace
  the good ``entities``/``mentions``.
- **robustness** (issue 43's probe): SQL that writes or runs away, a key an LLM server echoes, one
  corpus's damaged snapshot, a read-only and a moved lake, an alias bomb, deep JSON, NaN settings, a
  bad name or home, a full disk, a fresh corpus's SPRIG evaluation: each must end as it should, the
  failures in one line.

    .venv/bin/python benchmarks/reliability.py --before 2c421fa [--only robustness]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import ROOT, header, revision_on_path

sys.path.insert(0, str(ROOT / "tests"))
from crash_corpus import CORPUS, EDITED, METHODS, SELECTION, TEXTS, write_corpus  # noqa: E402  (the tests' corpus and
from fake_llm import MODEL, FakeServer  # noqa: E402  fake server, not package modules)

FRESH = "fresh"  # bad input is ingested as a new corpus: one that an old revision accepts changes nothing of the next case's
LLM_SELECTION = "key:documents or key:nodes or key:entities_llm or key:mentions_llm"
RUN = "import sys; from graphlake.cli import app; sys.argv = ['graphlake', *sys.argv[1:]]; app()"
# the corpus as SQL sees it, dangling references, and one query per method; run with the side's own code
CHECK = """
import json, sys
from pathlib import Path
from graphlake.api import GraphLake
from graphlake.warehouse.catalog import Catalog
home, corpus, methods = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(",")
found = {"tables": {}, "dangling": 0, "answers": {}}
nodes = f"(SELECT node_id FROM nodes WHERE corpus = '{corpus}')"
with Catalog(home).reader() as con:
    for table in ("documents", "queries", "qrels", "nodes", "edges", "vectors", "runs"):
        columns = "query_id, rank, node_id" if table == "runs" else "*"
        found["tables"][table] = sorted(map(repr, con.execute(f"SELECT {columns} FROM {table} WHERE corpus = ?", [corpus]).fetchall()))
    for table, condition in (("edges", f"src NOT IN {nodes} OR dst NOT IN {nodes}"), ("vectors", f"node_id NOT IN {nodes}"), ("runs", f"node_id NOT IN {nodes}")):
        found["dangling"] += con.execute(f"SELECT count(*) FROM {table} WHERE corpus = '{corpus}' AND ({condition})").fetchone()[0]
for method in methods:
    try:
        found["answers"][method] = len(GraphLake(home).search(corpus, method, "storm warnings", 3).hits)
    except Exception as error:
        found["answers"][method] = f"{type(error).__name__}: {error}"[:200]
print(json.dumps(found))
"""


class Side:
    """One revision's ``graphlake``, run in fresh interpreters on lakes under ``scratch``."""

    def __init__(self, name: str, pythonpath: Path | None, scratch: Path) -> None:
        self.name, self.scratch = name, scratch / name
        self.env = {**os.environ, "PYTHONPATH": str(pythonpath)} if pythonpath else dict(os.environ)

    def start(self, home: Path, *args: str, **env: str) -> subprocess.Popen:
        variables = {**self.env, "GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), **env}
        return subprocess.Popen([sys.executable, "-c", RUN, *args], env=variables, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def run(self, home: Path, *args: str, timeout: float = 900, **env: str) -> tuple[int, str]:
        process = self.start(home, *args, **env)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # e.g. a server started on a port that should have been refused
            os.killpg(process.pid, signal.SIGKILL)  # its children too (dagster dev's webserver and daemon)
            out, err = process.communicate()
            return -9, out + err + f"\n(still running after {timeout:g} s: killed)"
        return process.returncode, out + err

    def must(self, home: Path, *args: str, **env: str) -> None:
        code, output = self.run(home, *args, **env)
        if code != 0:
            raise SystemExit(f"{self.name}: graphlake {' '.join(args)} failed:\n{output[-2000:]}")

    def check(self, home: Path) -> dict:
        done = subprocess.run([sys.executable, "-c", CHECK, str(home), CORPUS, ",".join(METHODS)], env={**self.env, "GRAPHLAKE_HOME": str(home)}, capture_output=True, text=True)
        return json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr.strip().splitlines()[-1:]}

    def build(self, home: Path, source: Path, texts: dict[str, str]) -> None:
        write_corpus(source, texts)
        self.must(home, "ingest", "jsonl", str(source / "docs.jsonl"), "--queries", str(source / "queries.jsonl"), "--corpus", CORPUS)
        self.must(home, "materialize", "--corpus", CORPUS, "--select", SELECTION)


def written(home: Path) -> dict[str, int]:
    """The corpus's table files and artefact folders with their latest modification: one entry per
    thing an asset writes, in either revision's layout."""

    def mtime(path: Path) -> int:
        try:
            return max((p.stat().st_mtime_ns for p in [path, *path.rglob("*")]), default=0)
        except FileNotFoundError:  # renamed or removed by the run meanwhile
            return -1

    found = {}
    for path in home.glob(f"tables/*/corpus={CORPUS}/**/*.parquet"):
        found[str(path)] = mtime(path)
    for folder in home.glob(f"artifacts/*/corpus={CORPUS}"):
        for path in folder.iterdir():
            if not path.name.startswith("."):  # a folder being filled
                found[str(path)] = mtime(path)
    return {path: when for path, when in found.items() if when >= 0}


def consistent(state: dict, versions: list[dict]) -> tuple[bool, str]:
    if "error" in state:
        return False, f"unreadable: {state['error']}"
    if state["tables"] not in [v["tables"] for v in versions]:
        mixed = [t for t in state["tables"] if all(state["tables"][t] != v["tables"][t] for v in versions)]
        return False, f"mixed versions ({', '.join(mixed) or 'tables from both'})"
    if state["dangling"]:
        return False, f"{state['dangling']} rows name nodes outside nodes"
    failed = [m for m, n in state["answers"].items() if not isinstance(n, int) or n == 0]
    return (False, f"methods fail: {', '.join(failed)}") if failed else (True, "one version")


def kills(side: Side) -> tuple[int, int, list[str]]:
    home, source = side.scratch / "kills", side.scratch / "raw"
    side.build(side.scratch / "next", side.scratch / "raw-next", EDITED)
    side.build(home, source, TEXTS)
    versions = [side.check(home), side.check(side.scratch / "next")]
    write_corpus(source, EDITED)
    good, seen, notes, kill = 0, 0, [], 0
    while True:
        before = written(home)
        process = side.start(home, "materialize", "--corpus", CORPUS, "--select", SELECTION)
        while process.poll() is None and sum(before.get(p) != t for p, t in written(home).items()) < kill:
            time.sleep(0.02)
        if process.poll() is not None:
            break
        if kill == 0:
            time.sleep(2.0)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        kill += 1
        ok, why = consistent(side.check(home), versions)
        good, seen = good + ok, seen + 1
        notes.append(f"kill {kill}: {why}")
    process.communicate()
    ok, why = consistent(side.check(home), versions[1:])
    notes.append(f"the run after the kills: exit {process.returncode}, {why}")
    return good, seen, notes


def writers(side: Side) -> tuple[bool, str]:
    home, source = side.scratch / "writers", side.scratch / "raw-writers"
    write_corpus(source, TEXTS)
    side.must(home, "ingest", "jsonl", str(source / "docs.jsonl"), "--queries", str(source / "queries.jsonl"), "--corpus", CORPUS)
    both = [side.start(home, "materialize", "--corpus", CORPUS, "--select", SELECTION) for _ in range(2)]
    ended = [(p.wait(timeout=900), p.stderr.read()) for p in both]
    clean = side.scratch / "writers-clean"
    side.build(clean, side.scratch / "raw-writers-clean", TEXTS)
    codes = [code for code, _ in ended]
    if any("FileNotFoundError" in err for _, err in ended):
        return False, f"exits {codes}, FileNotFoundError"
    if any(code != 0 and "being written by" not in err for code, err in ended):
        return False, f"exits {codes}: " + next(err.strip().splitlines()[-1] for code, err in ended if code != 0)
    same = side.check(home).get("tables") == side.check(clean)["tables"]
    return same, f"exits {codes}, " + ("equal to one run" if same else "differs from one run")


def bad_input_cases(folder: Path) -> list[tuple[str, list[str], list[str], dict[str, str]]]:
    """(name, arguments, what the message must name, environment) for each case, all of which must
    fail; the files they read are written under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)

    def file(name: str, text: str | bytes) -> str:
        path = folder / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return str(path)

    record = json.dumps({"id": "a", "title": "A", "text": "alpha"}) + "\n"
    good = file("good.jsonl", record)
    ingest = ["ingest", "jsonl"]
    cases = [
        ("query --top 0", ["query", "--corpus", CORPUS, "--method", "bm25", "--top", "0", "x"], ["--top"]),
        ("query --top -3", ["query", "--corpus", CORPUS, "--method", "bm25", "--top", "-3", "x"], ["--top"]),
        ("query --top ten", ["query", "--corpus", CORPUS, "--method", "bm25", "--top", "ten", "x"], ["--top"]),
        ("eval --k 0", ["eval", "--corpus", CORPUS, "--k", "0"], ["--k"]),
        ("eval --k -5", ["eval", "--corpus", CORPUS, "--k", "-5"], ["--k"]),
        ("eval --k abc", ["eval", "--corpus", CORPUS, "--k", "abc"], ["--k"]),
        ("eval --sample 0", ["eval", "--corpus", CORPUS, "--sample", "0"], ["--sample"]),
        ("ingest --chunk-size 0", [*ingest, good, "--corpus", "c2", "--chunk-size", "0"], ["--chunk-size"]),
        ("ingest --chunk-size abc", [*ingest, good, "--corpus", "c2", "--chunk-size", "abc"], ["--chunk-size"]),
        ("ingest --chunk-overlap -1", [*ingest, good, "--corpus", "c2", "--chunk-overlap", "-1"], ["--chunk-overlap"]),
        ("ui --port 0", ["ui", "--port", "0"], ["--port"]),
        ("ui --port 99999", ["ui", "--port", "99999"], ["--port"]),
        ("query: unknown corpus", ["query", "--corpus", "nope", "--method", "bm25", "x"], ["nope"]),
        ("query: unknown method", ["query", "--corpus", CORPUS, "--method", "nope", "x"], ["nope"]),
        ("ingest: missing file", [*ingest, str(folder / "missing.jsonl"), "--corpus", FRESH], ["missing.jsonl"]),
        ("ingest: malformed JSON line", [*ingest, file("bad.jsonl", record + "{not json\n"), "--corpus", FRESH], ["bad.jsonl:2"]),
        ("ingest: not UTF-8", [*ingest, file("latin.jsonl", record.encode() + b'{"id": "b", "text": "caf\xe9"}\n'), "--corpus", FRESH], ["latin.jsonl:2"]),
        ("ingest: record without text", [*ingest, file("notext.jsonl", record + '{"id": "b", "title": "B"}\n'), "--corpus", FRESH], ["notext.jsonl:2"]),
        ("ingest: duplicate id", [*ingest, file("dup.jsonl", record + record.replace("alpha", "beta")), "--corpus", FRESH], ["dup.jsonl:2"]),
        ("ingest: empty file", [*ingest, file("empty.jsonl", ""), "--corpus", FRESH], ["empty.jsonl"]),
        ("ingest: a record that is a list", [*ingest, file("list.jsonl", record + "[1, 2]\n"), "--corpus", FRESH], ["list.jsonl:2"]),
        ("ingest: hotpotqa not a list", ["ingest", "hotpotqa", file("dict.json", json.dumps({"question": "x"})), "--corpus", FRESH], ["dict.json"]),
        ("ingest: huge line", [*ingest, file("huge.jsonl", record + json.dumps({"id": "b", "title": "B", "text": "x" * 5000}) + "\n"), "--corpus", FRESH], ["huge.jsonl:2"]),
        ("ingest: a folder for a file", [*ingest, str(folder), "--corpus", FRESH], [folder.name]),
        ("ingest: unknown format", ["ingest", "nope", good, "--corpus", FRESH], ["nope"]),
        ("ingest: malformed queries", [*ingest, good, "--queries", file("q.jsonl", "{oops\n"), "--corpus", FRESH], ["q.jsonl:1"]),
        ("ingest: qrel to an unknown doc", [*ingest, good, "--queries", file("q2.jsonl", json.dumps({"id": "q", "text": "t", "qrels": {"zz": 1}}) + "\n"), "--corpus", FRESH], ["zz"]),
    ]
    return [(name, args, named, {"GRAPHLAKE_MAX_LINE_BYTES": "1000"} if "huge" in name else {}) for name, args, named in cases]


def config_cases(side: Side, home: Path) -> list[tuple[str, bool, str]]:
    """Broken configuration files: the commands that need them fail naming file and line; the others work."""
    results = []
    methods, corpora = home / "methods.yaml", home / "corpora.yaml"
    kept = corpora.read_bytes()
    methods.write_text("rrf: {op: rrf, inputs: [bm25, dense]\nbm25: {op: bm25}\n")
    for args in (["sql", "select 1"], ["corpora"], ["--help"]):
        code, output = side.run(home, *args)
        results.append((f"broken methods.yaml, {args[0]} still works", code == 0, output.strip().splitlines()[-1][:160] if output.strip() else ""))
    code, output = side.run(home, "query", "--corpus", CORPUS, "--method", "bm25", "storm")
    results.append(("broken methods.yaml, query names it", clear(code, output, ["methods.yaml:2"]), last_line(output)))
    methods.write_text("bm25: {op: bm25}\nmine: {op: nope}\n")
    code, output = side.run(home, "query", "--corpus", CORPUS, "--method", "bm25", "storm")
    results.append(("unknown operator in methods.yaml", clear(code, output, ["methods.yaml", "nope"]), last_line(output)))
    methods.unlink()
    corpora.write_text("corpora:\n  mine: {format: jsonl, path: /x\n")
    code, output = side.run(home, "sql", "select 1")
    results.append(("broken corpora.yaml, sql still works", code == 0, last_line(output)))
    code, output = side.run(home, "corpora")
    results.append(("broken corpora.yaml, corpora names it", clear(code, output, ["corpora.yaml:3"]), last_line(output)))
    corpora.write_bytes(kept)
    return results


def last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def clear(code: int, output: str, named: list[str]) -> bool:
    return code != 0 and "Traceback" not in output and all(part in output for part in named)


def bad_inputs(side: Side) -> list[tuple[str, bool, str]]:
    home = side.scratch / "kills"  # a built lake, as a user's would be
    corpora = home / "corpora.yaml"
    results = []
    for name, args, named, env in bad_input_cases(side.scratch / "inputs"):
        kept = corpora.read_bytes()
        code, output = side.run(home, *args, timeout=120, **env)
        unchanged = corpora.read_bytes() == kept
        corpora.write_bytes(kept)
        ok = clear(code, output, named) and unchanged
        results.append((name, ok, last_line(output) + ("" if unchanged else " [corpora.yaml rewritten]")))
    return results + config_cases(side, home)


def faulty_llm(side: Side) -> list[tuple[str, bool, str]]:
    """After a good LLM run, each fault mode: did the good entities/mentions survive?"""
    server = FakeServer()
    try:
        home = side.scratch / "llm"
        texts = {"d0": "Marie Curie worked in Paris.", "d1": "Paris is in France.", "d2": "Curie won two prizes."}
        write_corpus(side.scratch / "raw-llm", texts)
        env = {"GRAPHLAKE_LLM_BASE_URL": server.url, "GRAPHLAKE_LLM_MODEL": MODEL, "GRAPHLAKE_LLM_RETRIES": "1", "GRAPHLAKE_LLM_TIMEOUT": "2"}
        side.must(home, "ingest", "jsonl", str(side.scratch / "raw-llm" / "docs.jsonl"), "--corpus", CORPUS)
        side.must(home, "materialize", "--corpus", CORPUS, "--select", LLM_SELECTION, **env)
        read = f"SELECT count(*) FROM entities WHERE corpus = '{CORPUS}' AND extractor = 'llm'"
        good = side.run(home, "sql", read)[1]
        results = []

        def answering(mode: str) -> None:  # and no cached answer: each node is asked again
            server.mode = mode
            for path in (home / "llm_cache").rglob("*.json"):
                path.unlink()

        for mode in ("garbage", "not-json", "500"):
            answering("good")  # back to the good tables first: an earlier mode may have replaced them
            side.must(home, "materialize", "--corpus", CORPUS, "--select", LLM_SELECTION, **env)
            answering(mode)
            code, output = side.run(home, "materialize", "--corpus", CORPUS, "--select", LLM_SELECTION, **env)
            kept = side.run(home, "sql", read)[1] == good
            results.append((f"LLM answers {mode} after a good run", kept, f"exit {code}: {last_line(output)}"))
        return results
    finally:
        server.close()


SECRET = "sk-probe-SECRET-4711"


def one_line(code: int, output: str, *named: str) -> bool:
    return code != 0 and len(output.strip().splitlines()) == 1 and all(part in output for part in named)


def robustness(side: Side) -> list[tuple[str, bool, str]]:
    """Issue 43's cases on a small built lake (and a second corpus in it), each (case, ok, what it printed)."""
    home = side.scratch / "robust"
    side.build(home, side.scratch / "raw-robust", TEXTS)
    results = []

    def case(name: str, ok: bool, output: str) -> None:
        results.append((name, ok, last_line(output)))

    committed = next(home.glob(f"tables/nodes/corpus={CORPUS}/data*.parquet"))
    before = committed.read_bytes()
    code, output = side.run(home, "sql", f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{committed}'")
    case("sql: EXPLAIN ANALYZE COPY over a committed file refused", code != 0 and committed.read_bytes() == before, output)
    code, output = side.run(home, "sql", f"SELECT * FROM read_text('{home / 'corpora.yaml'}')")
    case("sql: the lake's corpora.yaml not readable", code != 0, output)
    code, output = side.run(home, "sql", "SELECT count(*) FROM range(100000000000000)", timeout=60, GRAPHLAKE_SQL_TIMEOUT="2")
    case("sql: a runaway statement stopped, in one line", one_line(code, output), output)

    server = FakeServer()
    try:
        server.mode = "echo-key"
        env = {"GRAPHLAKE_LLM_BASE_URL": server.url, "GRAPHLAKE_LLM_MODEL": MODEL, "GRAPHLAKE_LLM_RETRIES": "0", "GRAPHLAKE_LLM_API_KEY": SECRET}
        code, output = side.run(home, "materialize", "--corpus", CORPUS, "--select", LLM_SELECTION, **env)
        stored = [p for p in home.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
        reached = "401" in output  # the server was asked and refused the key (the message says so)
        case("a key the LLM server echoes reaches no file and no output", code != 0 and reached and SECRET not in output and not stored, output)
    finally:
        server.close()

    write_corpus(side.scratch / "raw-other", {"o1": "Another corpus entirely."})
    side.must(home, "ingest", "jsonl", str(side.scratch / "raw-other" / "docs.jsonl"), "--corpus", "other")
    count = f"SELECT count(*) AS n FROM nodes WHERE corpus = '{CORPUS}'"
    expected = side.run(home, "sql", count, "--json")[1].strip().splitlines()[-1]
    snapshot = max((home / "snapshots" / "other").glob("*.json"))
    kept = snapshot.read_bytes()
    snapshot.write_text('{"number": 9, "tabl')
    code, output = side.run(home, "sql", count, "--json")
    case("sql over a corpus beside one with a damaged snapshot: its rows, all", code == 0 and expected in output and '"n": 0' not in expected, output)
    code, output = side.run(home, "query", "--corpus", CORPUS, "--method", "bm25", "storm")
    case("a query beside a corpus with a damaged snapshot", code == 0, output)
    snapshot.write_bytes(kept)

    moved = side.scratch / "moved"
    shutil.copytree(home, moved, symlinks=True)
    aside = home.with_name("robust-aside")
    home.rename(aside)
    code, output = side.run(moved, "sql", count, "--json")
    case("sql on a copied lake, the original gone", code == 0 and expected in output, output)
    aside.rename(home)
    mounted = side.scratch / "read-only"
    mounted.mkdir(exist_ok=True)
    if subprocess.run(["mount", "--bind", "-o", "ro", str(moved), str(mounted)], capture_output=True).returncode == 0:
        try:
            sql = side.run(mounted, "sql", "SELECT count(*) FROM nodes")
            query = side.run(mounted, "query", "--corpus", CORPUS, "--method", "bm25", "storm")
            case("sql and a query on a read-only mount", sql[0] == 0 and query[0] == 0, query[1] if query[0] else sql[1])
        finally:
            subprocess.run(["umount", str(mounted)], check=False)

    # nine levels of nine aliases in a method's description: 9**9 values once it is turned into text
    bomb = "mine:\n  op: bm25\n  about:\n    - &a [x, x, x, x, x, x, x, x, x]\n"
    bomb += "".join(f"    - &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    (home / "methods.yaml").write_text(bomb)
    code, output = side.run(home, "query", "--corpus", CORPUS, "--method", "bm25", "storm", timeout=30)  # its memory grows by the second
    case("a methods.yaml alias bomb: one line, at once", one_line(code, output, "methods.yaml"), output)
    (home / "methods.yaml").unlink()
    inputs = side.scratch / "inputs-robust"
    inputs.mkdir(exist_ok=True)
    deep = inputs / "deep.jsonl"
    deep.write_text('{"id": "a", "title": "", "text": ' + "[" * 5000 + "]" * 5000 + "}\n")
    code, output = side.run(home, "ingest", "jsonl", str(deep), "--corpus", "deep")
    case("deeply nested JSON: one line naming the file", one_line(code, output, "deep.jsonl:1"), output)
    fine = inputs / "fine.jsonl"
    fine.write_text(json.dumps({"id": "a", "title": "", "text": "alpha"}) + "\n")
    for name, args, env in (
        ("an invalid corpus name", ["--corpus", "bad name!"], {}),
        ("--chunk-overlap past --chunk-size", ["--corpus", "c3", "--chunk-size", "10", "--chunk-overlap", "20"], {}),
        ("GRAPHLAKE_LOCK_WAIT=nan", ["--corpus", "c4"], {"GRAPHLAKE_LOCK_WAIT": "nan"}),
    ):
        code, output = side.run(home, "ingest", "jsonl", str(fine), *args, **env)
        case(f"{name}: one line", one_line(code, output), output)
    code, output = side.run(fine / "lake", "sql", "select 1")
    case("an impossible GRAPHLAKE_HOME: one line", one_line(code, output), output)
    full = side.scratch / "full"
    full.mkdir(exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(full)], capture_output=True).returncode == 0:
        try:
            (full / "filler").write_bytes(b"\0" * (os.statvfs(full).f_bavail * os.statvfs(full).f_frsize - 40 * 1024))
            code, output = side.run(full / "lake", "ingest", "jsonl", str(fine), "--corpus", "c5")
            case("a full disk: one line", one_line(code, output), output)
        finally:
            subprocess.run(["umount", str(full)], check=False)
    write_corpus(side.scratch / "raw-held", TEXTS)
    side.must(home, "ingest", "jsonl", str(side.scratch / "raw-held" / "docs.jsonl"), "--queries", str(side.scratch / "raw-held" / "queries.jsonl"), "--corpus", "held")
    (home / "methods.yaml").write_text("use: [graph, rrf_ppr]\n")
    code, output = side.run(home, "eval", "--corpus", "held", "--methods", "graph,rrf_ppr")
    case("eval of SPRIG's methods on a fresh corpus", code == 0, output)
    return results


def probe(side: Side, log: Callable[[str], None], only: str | None = None) -> dict:
    found = {}
    if only == "robustness":
        log(f"{side.name}: robustness")
        found["robust"] = robustness(side)
        return found
    log(f"{side.name}: kills")
    found["kills"] = kills(side)
    log(f"{side.name}: writers")
    found["writers"] = writers(side)
    log(f"{side.name}: bad input")
    found["bad"] = bad_inputs(side)
    log(f"{side.name}: faulty LLM")
    found["llm"] = faulty_llm(side)
    log(f"{side.name}: robustness")
    found["robust"] = robustness(side)
    return found


def report(before: str, sides: dict[str, dict]) -> list[str]:
    b, a = sides["before"], sides["after"]
    count = lambda rows: f"{sum(ok for _, ok, _ in rows)}/{len(rows)}"  # noqa: E731
    lines = ["| probe | before | after |", "|---|---:|---:|"]
    if "kills" in a:
        lines += [
            f"| kills leaving one consistent version | {b['kills'][0]}/{b['kills'][1]} | {a['kills'][0]}/{a['kills'][1]} |",
            f"| two writers end cleanly, as one run | {'yes' if b['writers'][0] else 'no'} | {'yes' if a['writers'][0] else 'no'} |",
            f"| bad input / config: clear error, nothing lost | {count(b['bad'])} | {count(a['bad'])} |",
            f"| faulty LLM after a good run: good tables kept | {count(b['llm'])} | {count(a['llm'])} |",
        ]
    lines += [f"| robustness (issue 43): ends as it should | {count(b['robust'])} | {count(a['robust'])} |", "", f"before = {before}, after = the working tree."]
    for name, side in sides.items():
        lines += ["", f"## {name}", ""]
        if "kills" in side:
            lines += [*[f"- {note}" for note in side["kills"][2]], f"- writers: {side['writers'][1]}"]
        lines += [f"- {'ok' if ok else 'FAIL'} {case}: `{message}`" for case, ok, message in side.get("bad", []) + side.get("llm", []) + side["robust"]]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git revision to compare the working tree against")
    parser.add_argument("--only", choices=["robustness"], help="run only this probe (its results go to reliability_<probe>.md)")
    options = parser.parse_args()
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as scratch, revision_on_path(options.before) as before:
        sides = {}
        for name, path in (("before", before), ("after", None)):
            sides[name] = probe(Side(name, path, Path(scratch)), log, options.only)
            log(json.dumps({name: sides[name]}))  # each side's findings as soon as they are known
    lines = report(options.before, sides)
    print("\n".join(lines[:9]))
    command = f"python benchmarks/reliability.py --before {options.before}" + (f" --only {options.only}" if options.only else "")
    text = [*header(f"Reliability probe: {options.only or 'kills, writers, bad input, faulty LLM, robustness'}", command), "", *lines]
    name = f"reliability_{options.only}.md" if options.only else "reliability.md"  # a partial run keeps the full one's file
    (ROOT / "benchmarks" / "results" / name).write_text("\n".join(text) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
