"""Writes an application can trust, on a built lake-owned corpus: the log cannot lie (every entry
numbered and checksummed: an entry emptied of its text, two entries swapped, a torn tail, a repair
and the write after it are each named by ``graphlake doctor`` and refused by a search in one line,
in process and over HTTP, and no number is given twice); what goes in comes back exactly, and what
could not is refused at write time naming the field, the same in process, through ``RemoteLake`` and
over raw HTTP, before anything touches the disk; a copied lake writes and folds its own log only;
concurrent declarations through two servers all stay; a full disk is refused in one line."""

from __future__ import annotations

import datetime
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from conftest import built_once, copy_lake, use_lake
from graphlake.api import DamagedLog, GraphLake, IndexNotBuilt, RemoteLake, RequestError
from graphlake.cli import app
from graphlake.retrieval.methods import DEFAULT_METHODS
from graphlake.warehouse.config_files import load_mapping
from graphlake.warehouse.corpora import DEMO_PATH, CorpusRegistry
from graphlake.warehouse.write_checks import MAX_DOCUMENT_CHARS, MAX_METADATA_DEPTH
from graphlake.warehouse.write_log import corpus_log
from served import KEY, Server

METHODS = load_mapping(DEFAULT_METHODS)["use"]


def demo_documents(count: int) -> list[dict]:
    rows = [json.loads(line) for line in (DEMO_PATH / "corpus.jsonl").read_text().splitlines()][:count]
    return [{"id": row["id"], "title": row["title"], "text": row["text"], "metadata": row["metadata"]} for row in rows]


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def owned(tmp_path_factory) -> Path:
    """A lake whose corpus 'notes' (the lake's own) was built once from 8 demo documents; copy it to write."""

    def build(folder: Path) -> None:
        with pytest.MonkeyPatch.context() as patch:
            home = use_lake(patch, folder / "lake")
            cli("ingest", "api", "--corpus", "notes")
            GraphLake(home).upsert("notes", demo_documents(8))
            cli("materialize", "--corpus", "notes")

    return built_once(tmp_path_factory, "owned-notes", build) / "lake"


@pytest.fixture
def notes(owned, tmp_path, monkeypatch) -> Path:
    return use_lake(monkeypatch, copy_lake(owned, tmp_path / "lake"))


def entry(home: Path, seq: int) -> Path:
    return home / "writes" / "notes" / f"{seq:012d}.json"


def doctor(*args: str):
    return CliRunner().invoke(app, ["doctor", *args], catch_exceptions=False)


def test_the_log_cannot_lie(notes, tmp_path):
    lake = GraphLake(notes)
    fox = lake.upsert("notes", [{"id": "fox", "text": "The quick brown fox watched the kelp divers."}])
    gone = lake.delete("notes", ["fox"])
    other = lake.upsert("notes", [{"id": "owl", "text": "An owl counted the rockling on the reef."}])
    assert [h.doc_id for h in lake.search("notes", "bm25", "fox kelp divers", k=20).hits].count("fox") == 0
    server = Server(notes, tmp_path / "server.log", KEY)
    remote = RemoteLake(server.url, api_key=KEY)
    try:

        def refused(damaged: int, problem: str) -> None:
            """doctor names the entry; a search refuses in one line naming it, in process and over HTTP."""
            checked = doctor()
            assert checked.exit_code == 1 and f"{damaged:012d}.json" in checked.stderr and problem in " ".join(checked.stderr.split()), checked.stderr
            for searcher in (GraphLake(notes), remote):
                with pytest.raises(IndexNotBuilt) as error:
                    searcher.search("notes", "rrf", "owl reef", k=3)
                message = str(error.value)
                assert f"write {damaged} (writes/notes/{damaged:012d}.json)" in message and problem in message and "\n" not in message, message
                assert str(notes) not in message  # the lake's own path, never the machine's

        assert [h.doc_id for h in remote.search("notes", "bm25", "owl rockling", k=1).hits] == ["owl"]  # the server has read the log
        # 1. an entry that is valid JSON, with a matching checksum, but a document without its text
        body = json.loads(entry(notes, fox.seq).read_text())
        original = entry(notes, fox.seq).read_bytes()
        del body["documents"][0]["text"]
        from graphlake.warehouse.write_log import _digest

        body.pop("sha256")
        entry(notes, fox.seq).write_text(json.dumps({**body, "sha256": _digest(body)}))
        refused(fox.seq, "not a write the lake takes")
        entry(notes, fox.seq).write_bytes(original)
        # 2. the upsert and its delete swapped: the delete first would resurrect the fox
        deleting = entry(notes, gone.seq).read_bytes()
        entry(notes, gone.seq).write_bytes(original)
        entry(notes, fox.seq).write_bytes(deleting)
        refused(fox.seq, f"it says it is write {gone.seq}: moved or swapped")
        entry(notes, fox.seq).write_bytes(original)
        entry(notes, gone.seq).write_bytes(deleting)
        assert doctor().exit_code == 0 and [h.doc_id for h in remote.search("notes", "bm25", "owl rockling", k=1).hits] == ["owl"]
        # 3. a torn tail the server had read and kept: it reads it again, and refuses
        torn = entry(notes, other.seq).read_bytes()
        entry(notes, other.seq).write_bytes(torn[: len(torn) // 2])
        refused(other.seq, "is damaged: not JSON")
        # 4. the repair sets it aside above a high-water mark: the next write takes a new number, which the server serves
        repaired = doctor("--repair")
        assert repaired.exit_code == 0 and f"set {other.seq:012d}.json aside" in repaired.stderr, repaired.stderr
        again = remote.upsert("notes", [{"id": "heron", "text": "A heron stood over the eelgrass transplant."}])
        assert again.seq == other.seq + 1 and not entry(notes, other.seq).exists()
        assert [h.doc_id for h in remote.search("notes", "dense", "A heron stood over the eelgrass transplant.", k=1, after_write=again.seq).hits] == ["heron"]
        assert "owl" not in {h.doc_id for h in remote.search("notes", "bm25", "owl rockling", k=20).hits}
        (notes / "writes" / "notes" / "high-water").write_text("garbled")  # a mark read as 0 would give numbers again
        checked = doctor()
        assert checked.exit_code == 1 and "the high-water mark cannot be read" in checked.stderr, checked.stderr
        with pytest.raises(DamagedLog, match="high-water mark"):
            lake.upsert("notes", [{"id": "never", "text": "Refused while the numbering cannot be trusted."}])
        assert doctor("--repair").exit_code == 0 and lake.upsert("notes", [{"id": "after", "text": "Numbered past the mark."}]).seq == again.seq + 1
        with httpx.Client(headers={"X-API-Key": KEY}) as http:  # a damaged log is a 409 with one line, never a 500
            entry(notes, again.seq + 1).write_text("{}")
            answer = http.post(f"{server.url}/search", json={"corpus": "notes", "method": "bm25", "query": "heron"})
            assert answer.status_code == 409 and "write" in answer.json()["error"] and "graphlake doctor --repair" in answer.json()["error"], answer.text
            assert http.get(f"{server.url}/health").status_code == 200  # the connection and the server go on
    finally:
        remote.close()
        server.stop()


def test_what_goes_in_comes_back_and_what_cannot_is_refused(notes, tmp_path):
    lake = GraphLake(notes)
    metadata = {"year": 2021, "tags": ["kelp", "survey"], "nested": {"depth": {"two": 2.5}}, "flag": True, "none": None, "big": 2**53}
    written = lake.upsert("notes", [{"id": "exact", "title": "Exact", "text": "Rockling counts along the Aldersey transect.", "metadata": metadata}])
    [hit] = lake.search("notes", "bm25", "rockling Aldersey transect", k=1, after_write=written.seq).hits
    assert hit.doc_id == "exact" and hit.metadata == metadata and hit.source == "lake://notes/exact"  # nothing added to the metadata
    from graphlake.api.langchain import GraphLakeRetriever

    [document] = GraphLakeRetriever(lake=lake, corpus="notes", method="bm25", k=1).invoke("rockling Aldersey transect")
    assert document.id == "exact" and {k: v for k, v in document.metadata.items() if k != "graphlake"} == metadata

    deep: dict = {}
    for _ in range(5_000):
        deep = {"d": deep}
    deep_json = '{"documents": [{"id": "d", "text": "t", "metadata": ' + '{"d": ' * 5_000 + "{}" + "}" * 5_000 + "}]}"
    bad = [  # what could not be stored or filtered exactly; the words naming it; the same as raw JSON, where JSON can say it
        ({"id": "a", "text": "t", "metadata": {"big": 10**30}}, r"documents\[0\] \(id 'a'\): metadata\.big: the whole number 1e\+30 is beyond ±2\^53", None),
        ({"id": "b", "text": "caf\ud800"}, r"documents\[0\] \(id 'b'\): text: not valid Unicode \(a lone surrogate at character 3\)", '{"documents": [{"id": "b", "text": "caf\\ud800"}]}'),
        ({"id": "\ud800", "text": "t"}, r"documents\[0\]\.id: not valid Unicode", '{"documents": [{"id": "\\ud800", "text": "t"}]}'),
        (
            {"id": "c", "text": "t", "metadata": {"k\udc00": 1}},
            r"documents\[0\] \(id 'c'\): metadata: key 'k\\udc00': not valid Unicode",
            '{"documents": [{"id": "c", "text": "t", "metadata": {"k\\udc00": 1}}]}',
        ),
        ({"id": "d", "text": "t", "metadata": deep}, rf"documents\[0\] \(id 'd'\): metadata(\.d)+: nested more than {MAX_METADATA_DEPTH} deep", deep_json),
        ({"id": "e", "text": "x" * (MAX_DOCUMENT_CHARS + 1)}, rf"text: {MAX_DOCUMENT_CHARS + 1:,} characters, more than {MAX_DOCUMENT_CHARS:,}", None),
        ({"id": "f", "text": "t", "metadata": {"when": datetime.date(2024, 1, 2)}}, r"metadata\.when: a date is not a JSON value .*ISO string", ""),
        ({"id": "g", "text": "t", "metadata": {"x": float("nan")}}, r"metadata\.x: nan is not a JSON number", ""),
        ({"id": "h", "text": "t", "metadata": {"n": 10**400}}, r"metadata\.n: the whole number of about 10\^400 is beyond ±2\^53", None),
        ({"id": "i", "text": "t", "title": 0}, r"documents\[0\] \(id 'i'\): title: a string", ""),
        ({"id": "j", "text": "t", "metadata": []}, r"documents\[0\] \(id 'j'\): metadata: an object, got list", ""),
    ]
    server = Server(notes, tmp_path / "server.log", KEY)
    remote = RemoteLake(server.url, api_key=KEY)
    log = notes / "writes" / "notes"
    before = sorted(os.listdir(log))
    try:
        with httpx.Client(headers={"X-API-Key": KEY, "Content-Type": "application/json"}, timeout=60) as http:
            for document, words, raw in bad:
                for writer in (lake, remote):  # RemoteLake checks before it sends, as the lake does
                    with pytest.raises(RequestError, match=words):
                        writer.upsert("notes", [document])
                if raw == "":
                    continue  # JSON cannot say it
                body = raw.encode() if raw is not None else json.dumps({"documents": [document]}).encode()
                answer = http.post(f"{server.url}/corpora/notes/documents", content=body)
                status = 400 if document["id"] == "d" else 422  # JSON too deep to parse is refused before it is read
                assert answer.status_code == status and "\n" not in answer.json()["error"], (document["id"], answer.text[:300])
                named = {"a": "metadata.big: the whole number 1e+30 is beyond ±2^53", "d": "nested too deeply", "e": "text", "h": "of about 10^400"}.get(document["id"], "not valid Unicode")
                assert named in answer.json()["error"], (named, answer.text[:300])
            assert http.get(f"{server.url}/health").status_code == 200
        with pytest.raises(RequestError, match=r"ids\[0\]: not valid Unicode"):
            lake.delete("notes", ["\ud800"])
        assert sorted(os.listdir(log)) == before  # nothing written, no staged file left
    finally:
        remote.close()
        server.stop()


def test_written_documents_answer_at_once_by_new_words_new_fields_and_in_a_new_corpus(notes, tmp_path):
    """Pending documents are first-class: BM25 matches words no committed node has, a filter on a field
    only pending documents have selects them (scored, not zero), in process, over HTTP and through both
    adapters; LlamaIndex nodes split from a document keep its id and go with it; and a corpus never
    built answers every default method from its first write."""
    from langchain_core.documents import Document
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter

    from graphlake.api.langchain import GraphLakeRetriever as LangChainRetriever
    from graphlake.api.llama_index import GraphLakeRetriever as LlamaIndexRetriever

    lake = GraphLake(notes)
    question = "who recalibrated the marmalade telescope?"
    telescope = {"id": "telescope", "text": "Ingrid recalibrated the marmalade telescope before the kelp survey.", "metadata": {"priority": 3}}
    lake.upsert("notes", [telescope, {"id": "quiet", "text": "A quiet note about rockling counts.", "metadata": {"priority": 1}}])
    server = Server(notes, tmp_path / "server.log", KEY)
    remote = RemoteLake(server.url, api_key=KEY)
    try:
        assert [(h.doc_id, h.fresh) for h in lake.search("notes", "bm25", "marmalade telescope", k=3).hits] == [("telescope", True)]  # words new to the corpus
        for method in METHODS:
            for searcher in (lake, remote):
                hits = searcher.search("notes", method, question, k=3, filter="priority >= 2").hits
                assert [h.doc_id for h in hits] == ["telescope"] and hits[0].score > 0, (method, type(searcher).__name__, hits)
        [document] = LangChainRetriever(lake=remote, corpus="notes", k=3, filter={"field": "priority", "gte": 2}).invoke(question)
        assert document.id == "telescope" and document.metadata["priority"] == 3
        [node] = LlamaIndexRetriever(lake, "notes", k=3, filter=MetadataFilter(key="priority", value=2, operator=FilterOperator.GTE)).retrieve(question)
        assert node.node.ref_doc_id == "telescope" and node.score > 0

        from llama_index.core import Document as LlamaDocument
        from llama_index.core.node_parser import SentenceSplitter

        long = LlamaDocument(text=" ".join(f"Transect {i} of the Aldersey kelp census counted urchins." for i in range(40)), id_="census", metadata={"year": 2024})
        split = SentenceSplitter(chunk_size=48, chunk_overlap=0).get_nodes_from_documents([long])
        through_server = LlamaIndexRetriever(remote, "notes", k=30)
        assert through_server.add(split) == [n.node_id for n in split] and len(split) >= 10
        found = [n for n in through_server.retrieve("Aldersey kelp census urchins") if n.node.metadata["graphlake"]["doc_id"] in {n.node_id for n in split}]
        assert found and all(n.node.ref_doc_id == "census" and "ref_doc_id" not in n.node.metadata and n.node.metadata["year"] == 2024 for n in found)
        through_server.delete("census")  # every node split from it
        assert through_server.settings.reading(through_server.written).overrides["after_write"] == through_server.written > 0
        assert not {n.node_id for n in split} & set(remote.document_ids("notes")) and "telescope" in remote.document_ids("notes")

        remote.create_corpus("brand-new")  # never built: empty, then its first write answers every method
        assert remote.search("brand-new", "ap_three", question, k=3).hits == []
        adapter = LangChainRetriever(lake=remote, corpus="brand-new")
        adapter.add_documents([Document(page_content=telescope["text"], metadata={"priority": 3})], ids=["telescope"])
        assert adapter._settings({}).overrides == {"after_write": 1} and adapter.invoke(question)[0].id == "telescope"  # it reads its own writes
        remote.upsert("brand-new", [{"id": "other", "text": "Urchin removal on the northern reef."}])
        for method in METHODS:
            for searcher in (lake, remote):
                answer = searcher.search("brand-new", method, question, k=3)
                assert answer.hits[0].doc_id == "telescope" and answer.hits[0].fresh, (method, answer.hits)
                assert any("has no build yet" in note for note in answer.notes), answer.notes
            assert [h.doc_id for h in lake.search("brand-new", method, question, k=3, filter="priority >= 2").hits] == ["telescope"], method
    finally:
        remote.close()
        server.stop()


def test_a_model_the_lake_tunes_serves_its_base_weights_until_the_first_build(lake):
    """``use: {dense: tuned}`` on a corpus never built: every default method answers from the first
    write, with the base weights, and says so in the answer's notes."""
    lake.mkdir()
    (lake / "models.yaml").write_text("use: {dense: tuned}\nmodels:\n  tuned: {kind: dense, tune: all-MiniLM-L6-v2}\n")
    opened = GraphLake(lake)
    opened.create_corpus("tuned-notes")
    opened.upsert("tuned-notes", [{"id": "fox", "text": "The quick brown fox recalibrated the marmalade telescope."}, {"id": "owl", "text": "An owl on the reef."}])
    for method in METHODS:
        answer = opened.search("tuned-notes", method, "who recalibrated the telescope?", k=2)
        assert answer.hits[0].doc_id == "fox", (method, answer.hits)
        assert any("model 'tuned' is not tuned for corpus 'tuned-notes' yet: its base weights (all-MiniLM-L6-v2)" in note for note in answer.notes), answer.notes


def test_writes_are_encoded_once_kept_and_pushed_back_past_the_bound(notes, tmp_path):
    """A write is encoded before it is acknowledged and its vectors kept beside the log: a lake opened
    afresh (a restart) encodes none of them to search, and encodes (and keeps) again only a write whose
    vectors are gone. Past ``GRAPHLAKE_WRITE_BACKLOG`` documents being encoded, a write is refused at
    once: 429 with Retry-After, ``Overloaded`` in Python."""
    from graphlake.api import Overloaded

    written = [GraphLake(notes).upsert("notes", [{"id": f"n{w}-{i}", "text": f"Note {i} of batch {w} about the kelp transects."} for i in range(5)]) for w in range(4)]
    vectors = notes / "writes" / "notes" / "vectors"
    assert sorted(p.name for p in vectors.iterdir()) == [f"{w.seq:012d}.arrow" for w in written]
    restarted = GraphLake(notes)
    assert restarted.searchers.acquire("notes").fresh.encoded_here == 0
    assert "n2-3" in {h.doc_id for h in restarted.search("notes", "dense", "Note 3 of batch 2 about the kelp transects.", k=3).hits}
    (vectors / f"{written[1].seq:012d}.arrow").unlink()
    assert GraphLake(notes).searchers.acquire("notes").fresh.encoded_here == 5 and (vectors / f"{written[1].seq:012d}.arrow").is_file()

    server = Server(notes, tmp_path / "server.log", KEY, {"GRAPHLAKE_WRITE_BACKLOG": "50"})
    remote = RemoteLake(server.url, api_key=KEY)
    try:
        remote.upsert("notes", [{"id": "warm", "text": "The server's encoders, loaded."}])
        big = [{"id": f"big-{i}", "text": f"Paragraph {i} on urchin barrens, sea otters and the recovery of kelp forests. " * 8} for i in range(50)]
        answers: list = []

        def write(documents: list[dict]) -> None:
            try:
                answers.append(remote.upsert("notes", documents))
            except Overloaded as error:
                answers.append(error)

        first = threading.Thread(target=write, args=(big,))
        first.start()
        while first.is_alive() and not any(isinstance(a, Overloaded) for a in answers):  # small writes beside the big one: one of them is refused
            write([{"id": "late", "text": "One more note."}])
        first.join()
        refused = [a for a in answers if isinstance(a, Overloaded)]
        assert refused and refused[0].retry_after >= 1 and "would pass the bound of 50 (GRAPHLAKE_WRITE_BACKLOG)" in str(refused[0]), answers
        assert any(not isinstance(a, Overloaded) for a in answers)  # the write in flight was taken
        raw = httpx.post(f"{server.url}/corpora/notes/documents", json={"documents": big[:1]}, headers={"X-API-Key": KEY}, timeout=60)
        assert raw.status_code == 200  # an idle backlog takes a write again
    finally:
        remote.close()
        server.stop()


def test_a_fold_is_warmed_before_it_serves_and_the_old_snapshot_answers_exactly_meanwhile(notes, monkeypatch):
    """After a fold commits, a lake that searched the corpus keeps answering from the snapshot before
    while the new one is warmed (the writes the fold took and trimmed from the log come from the entries
    it read), then serves the new one; a lake that never read those entries waits for the warm-up. The
    warm-up is held back here by an event (on 8 documents it takes milliseconds; on a real corpus,
    seconds): everything else is the lake's own code."""
    from graphlake.api.searchers import SearcherManager

    release, warming = threading.Event(), threading.Event()
    original = SearcherManager._warm

    def held(self, *args):
        warming.set()
        release.wait(60)
        original(self, *args)

    monkeypatch.setattr(SearcherManager, "_warm", held)
    reader, late = GraphLake(notes), GraphLake(notes)
    late.search("notes", "bm25", "kelp", k=3)  # served, but it reads none of the writes below
    reader.upsert("notes", [{"id": "otter", "text": "Sea otters returned to the Aldersey kelp beds in spring."}])
    gone = reader.delete("notes", ["d01"])
    question = "Sea otters returned to the Aldersey kelp beds"
    assert [h.doc_id for h in reader.search("notes", "bm25", question, k=1).hits] == ["otter"]
    before = reader.searchers.served("notes")
    cli("materialize", "--corpus", "notes")
    assert not list((notes / "writes" / "notes").glob("*.json"))  # folded and trimmed

    hits = reader.search("notes", "bm25", question, k=50, after_write=gone.seq).hits  # the old snapshot, with the entries it read
    assert warming.is_set() and reader.searchers.served("notes") is before
    assert [(h.doc_id, h.fresh) for h in hits][:1] == [("otter", True)] and "d01" not in {h.doc_id for h in hits}
    meanwhile = reader.searchers.acquire("notes")
    assert meanwhile.served is before and (meanwhile.fresh.through, meanwhile.fresh.touched) == (gone.seq, ["d01", "otter"])
    threading.Timer(1.0, release.set).start()
    started = time.monotonic()
    waited = late.search("notes", "bm25", question, k=50).hits  # it cannot answer from the old one: it waits for the new
    assert time.monotonic() - started >= 0.9 and [(h.doc_id, h.fresh) for h in waited][:1] == [("otter", False)] and "d01" not in {h.doc_id for h in waited}
    for _ in range(100):
        if reader.searchers.served("notes") is not before:
            break
        time.sleep(0.05)
    now = reader.searchers.acquire("notes")
    assert now.served is not before and now.fresh is None and [(h.doc_id, h.fresh) for h in reader.search("notes", "bm25", question, k=1).hits] == [("otter", False)]


def test_chaos_two_servers_a_killed_server_and_a_killed_fold_lose_and_resurrect_nothing(notes, tmp_path):
    """Two writers and two searchers on two servers of one lake for ~40 s, while one server is killed
    (SIGKILL) and restarted and a fold is killed at a random moment. Every acknowledged write is then
    present at its last version or later (a write in flight when its server died may have been durable
    without an answer), no search that started after a delete's acknowledgement returned the document
    (those documents are never written again), no search returned a document twice, and nothing is
    doubled after the last fold; the only damage left is what an append cut short left, which
    ``graphlake doctor --repair`` removes."""
    draw = random.Random(11)
    servers = [Server(notes, tmp_path / f"server{i}.log", KEY) for i in range(2)]
    urls = [server.url for server in servers]
    acknowledged: dict[str, int] = {}  # a rewritten document's last acknowledged version
    deleted: dict[str, float] = {}  # a document deleted for good: when its delete was acknowledged
    stale: list[str] = []
    doubled: list[list[str]] = []
    stop = threading.Event()

    def post(verb: str, body: dict, at: int) -> httpx.Response | None:
        try:
            return httpx.request(verb, f"{urls[at % 2]}/corpora/notes/documents", json=body, headers={"X-API-Key": KEY}, timeout=60)
        except httpx.HTTPError:
            return None  # its server was killed: not acknowledged

    def write(writer: int) -> None:
        for n in itertools.count():
            if stop.is_set():
                return
            doc_id, version = f"w{writer}-{n % 6}", n
            answer = post("POST", {"documents": [{"id": doc_id, "text": f"Chaos note version {version} of {doc_id}."}]}, n)
            if answer is not None and answer.status_code == 200:
                acknowledged[doc_id] = version
            gone = f"gone-{writer}-{n}"
            if (answer := post("POST", {"documents": [{"id": gone, "text": f"Chaos note {gone}, soon deleted."}]}, n + 1)) is not None and answer.status_code == 200:
                if (answer := post("DELETE", {"ids": [gone]}, n)) is not None and answer.status_code == 200:
                    deleted[gone] = time.monotonic()

    def search(searcher: int) -> None:
        with httpx.Client(headers={"X-API-Key": KEY}, timeout=60) as http:
            for n in itertools.count():
                if stop.is_set():
                    return
                started, gone = time.monotonic(), dict(deleted)
                try:
                    answer = http.post(f"{urls[(n + searcher) % 2]}/search", json={"corpus": "notes", "method": "bm25", "query": "chaos note soon deleted", "k": 200, "group_by": "document"})
                except httpx.HTTPError:
                    continue
                if answer.status_code != 200:
                    continue
                found = [hit["doc_id"] for hit in answer.json()["hits"]]
                stale.extend(d for d in found if d in gone and gone[d] < started)
                if len(found) != len(set(found)):
                    doubled.append(found)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(2)] + [threading.Thread(target=search, args=(s,)) for s in range(2)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(8)
        servers[0].process.kill()  # a server killed mid-stream, restarted on another port
        servers[0].process.wait()
        servers[0] = Server(notes, tmp_path / "server0-again.log", KEY)
        urls[0] = servers[0].url
        command = [str(Path(sys.executable).with_name("graphlake")), "materialize", "--corpus", "notes"]
        fold = subprocess.Popen(command, env={**os.environ, "GRAPHLAKE_HOME": str(notes), "DAGSTER_HOME": str(notes / "dagster")}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(draw.uniform(3, 12))
        fold.kill()  # a fold killed at a random moment
        fold.wait()
        time.sleep(8)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for server in servers:
            server.stop()
    assert len(acknowledged) == 12 and len(deleted) > 20 and not stale and not doubled, (len(deleted), stale[:5], doubled[:1])
    if doctor().exit_code:  # an append a kill cut short: never acknowledged, removed
        assert "an append that never finished" in doctor().stderr and doctor("--repair").exit_code == 0
    assert doctor().exit_code == 0
    cli("materialize", "--corpus", "notes")
    rows = GraphLake(notes).sql("select doc_id, text from documents where corpus = 'notes'").to_pylist()
    ids = [row["doc_id"] for row in rows]
    versions = {row["doc_id"]: int(row["text"].split()[3]) for row in rows if row["doc_id"].startswith("w")}
    assert len(ids) == len(set(ids)) and not set(deleted) & set(ids)
    assert all(versions[doc_id] >= version for doc_id, version in acknowledged.items()), (versions, acknowledged)


def test_a_copied_lake_writes_and_folds_only_its_own_log(notes, tmp_path, monkeypatch):
    GraphLake(notes).upsert("notes", [{"id": "both", "text": "Written before the copy: both lakes have it."}])
    copy = copy_lake(notes, tmp_path / "copy")
    assert not [p for p in notes.rglob("*.yaml") if str(notes) in p.read_text()]  # no lake file names where the lake is
    GraphLake(notes).upsert("notes", [{"id": "mine", "text": "Only the original lake has this otter."}])
    GraphLake(copy).upsert("notes", [{"id": "theirs", "text": "Only the copied lake has this heron."}])
    for home, own, other in ((notes, "mine", "theirs"), (copy, "theirs", "mine")):
        use_lake(monkeypatch, home)
        cli("materialize", "--corpus", "notes")
        ids = set(GraphLake(home).sql("select doc_id from documents where corpus = 'notes'").column("doc_id").to_pylist())
        assert {"both", own} <= ids and other not in ids, (home.name, sorted(ids))
        assert corpus_log(home, "notes").numbers() == []  # folded and trimmed, its own log only


def test_concurrent_declarations_through_two_servers_are_all_kept(notes, tmp_path):
    servers = [Server(notes, tmp_path / f"server{i}.log", KEY) for i in range(2)]
    try:
        answers: list[int] = []
        for round_ in range(3):

            def declare(name: str, url: str) -> None:
                answers.append(httpx.post(f"{url}/corpora", json={"name": name}, headers={"X-API-Key": KEY}, timeout=60).status_code)

            threads = [threading.Thread(target=declare, args=(f"round{round_}-{i}", servers[i % 2].url)) for i in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert answers == [200] * 24
        declared = CorpusRegistry(notes).all()
        assert all(f"round{r}-{i}" in declared for r in range(3) for i in range(8)) and "notes" in declared
        assert not [name for name in os.listdir(notes) if name.endswith(".tmp")]
    finally:
        for server in servers:
            server.stop()


FULL_DISK = """
import os, socket, subprocess, sys, time
from pathlib import Path
import httpx
from graphlake.api import DiskFull, GraphLake
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.write_log import corpus_log
home = Path(sys.argv[1])
CorpusRegistry(home).declare_owned("notes")
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
server = subprocess.Popen([sys.argv[2], "serve", "--port", str(port)], env={**os.environ, "GRAPHLAKE_HOME": str(home)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
url = f"http://127.0.0.1:{port}"
while True:
    try:
        if httpx.get(url + "/health").status_code == 200:
            break
    except httpx.HTTPError:
        time.sleep(0.2)
lake, acknowledged = GraphLake(home), 0
try:
    while True:
        lake.upsert("notes", [{"id": f"d{acknowledged}", "text": "kelp " * 2000}])
        acknowledged += 1
except DiskFull as error:
    print("REFUSED", acknowledged, error)
try:  # whatever room the refused write left, taken
    with open(home / "filler", "wb") as filler:
        while True:
            filler.write(b"x" * 512)
            filler.flush()
except OSError:
    pass
answer = httpx.post(url + "/corpora/notes/documents", json={"documents": [{"id": "over-http", "text": "kelp " * 2000}]}, timeout=300)
print("HTTP", answer.status_code, answer.json()["error"])
declared = (home / "corpora.yaml").read_bytes()
try:
    CorpusRegistry(home).declare_owned("another")
except DiskFull as error:
    print("DECLARATION", (home / "corpora.yaml").read_bytes() == declared, error)
server.terminate()
server.wait()
log = home / "writes" / "notes"
vectors = log / "vectors"  # each acknowledged write's vectors, where the disk had room for them
print("LEFT", sorted(n for n in os.listdir(log) if not n.endswith(".json") and n != "vectors") + sorted(n for n in os.listdir(vectors) if not n.endswith(".arrow")) + sorted(n for n in os.listdir(home) if n.startswith(".")))
print("READ", len(corpus_log(home, "notes").pending()) == acknowledged)
"""


def test_a_full_disk_is_refused_in_one_line_and_leaves_nothing(tmp_path):
    """On a 1 MB tmpfs mounted in a mount namespace of its own (``unshare``; skipped where the kernel
    lets this account make none): writes until the disk is full, then refused with ``DiskFull`` in one
    line in Python, 507 over HTTP, a declaration refused alike; no partial file left, every
    acknowledged write readable."""
    mount = tmp_path / "small"
    mount.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(FULL_DISK)
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no mount namespace to mount a small tmpfs in (unshare -rm)")
    graphlake = shutil.which("graphlake") or str(Path(sys.executable).parent / "graphlake")
    shell = f"mount -t tmpfs -o size=1m tmpfs {mount} && {sys.executable} {script} {mount / 'lake'} {graphlake}"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    count, message = lines["REFUSED"].split(" ", 1)
    assert int(count) > 10 and message.startswith("write to corpus 'notes': no room on the lake's disk (No space left on device); nothing of it was kept"), done.stdout
    assert lines["HTTP"].startswith("507 write to corpus 'notes': no room"), done.stdout
    assert lines["DECLARATION"].startswith("True declaring corpora in corpora.yaml: no room"), done.stdout
    assert lines["LEFT"] == "[]" and lines["READ"] == "True", done.stdout
