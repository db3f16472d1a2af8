"""Documents and corpora have a lifecycle, the same in Python and over HTTP: documents read by id as
written, a corpus listed in pages by a cursor while writes go on (no document twice, none missing), and
a corpus dropped whole in one step, refused while a build holds it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from graphlake.api import CorpusBusy, GraphLake, RemoteLake, UnknownName
from served import KEY, Server


def test_documents_are_read_by_id_and_listed_in_pages_while_writes_go_on(lake, tmp_path):
    opened = GraphLake(lake)
    opened.create_corpus("log")
    steady = [{"id": f"s{i:03d}", "text": f"Steady note {i} on the mooring line.", "metadata": {"n": i, "deep": {"list": [1, "two", None]}}} for i in range(120)]
    opened.upsert("log", steady[:60])
    opened.upsert("log", steady[60:])
    server = Server(lake, tmp_path / "server.log", KEY)
    remote = RemoteLake(server.url, api_key=KEY)
    try:
        for reader in (opened, remote):
            got = reader.get_documents("log", ["s007", "missing", "s003", "s007"])
            assert [(d.id, d.text, d.metadata) for d in got] == [("s007", steady[7]["text"], steady[7]["metadata"]), ("s003", steady[3]["text"], steady[3]["metadata"])]
            assert reader.get_documents("log", []) == []

        stop, churn = threading.Event(), []

        def write() -> None:  # documents come and go while the pages are read
            n = 0
            while not stop.is_set():
                opened.upsert("log", [{"id": f"c{n:04d}", "text": f"Churning note {n}."}])
                if n >= 2:
                    opened.delete("log", [f"c{n - 2:04d}"])
                churn.append(n)
                n += 1

        writer = threading.Thread(target=write)
        writer.start()
        try:
            for reader in (opened, remote):
                seen, after, pages = [], None, 0
                while True:
                    page = reader.list_documents("log", after=after, limit=7)
                    seen += [d.id for d in page.documents]
                    pages += 1
                    if page.next is None:
                        break
                    after = page.next
                    time.sleep(0.02)
                steady_seen = [i for i in seen if i.startswith("s")]
                assert steady_seen == [d["id"] for d in steady], reader  # each once, in id order
                assert len(seen) == len(set(seen)) and pages >= 18
        finally:
            stop.set()
            writer.join()
        assert len(churn) >= 3
        page = remote.list_documents("log", limit=5, filter="n >= 118")
        assert [d.id for d in page.documents] == ["s118", "s119"] and page.next is None

        def cli(*args: str) -> list[dict]:
            done = subprocess.run(
                [shutil.which("graphlake") or str(Path(sys.executable).parent / "graphlake"), "documents", "log", *args],
                capture_output=True,
                text=True,
                env={**os.environ, "GRAPHLAKE_HOME": str(lake), "GRAPHLAKE_API_KEY": KEY},
            )
            assert done.returncode == 0, done.stderr[-2000:]
            return [json.loads(line) for line in done.stdout.splitlines()]

        assert cli("--id", "s007") == [{"id": "s007", "text": steady[7]["text"], "title": "", "metadata": steady[7]["metadata"]}]
        listed = cli("--filter", "n >= 117", "--limit", "2", "--server", server.url)
        assert [d.get("id") for d in listed] == ["s117", "s118", None] and listed[-1] == {"next": "s118"}
    finally:
        remote.close()
        server.stop()


HOLD = """
import sys, time
from pathlib import Path
from graphlake.warehouse.locks import writer_lock
with writer_lock(Path(sys.argv[1]), sys.argv[2], "a build of the test"):
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
"""


def test_a_corpus_is_dropped_whole_and_not_while_a_build_holds_it(lake, tmp_path):
    opened = GraphLake(lake)
    opened.create_corpus("gone")
    opened.upsert("gone", [{"id": "a", "text": "A note that will be dropped with its corpus."}])
    assert opened.search("gone", "rrf", "dropped note", k=1).hits[0].doc_id == "a"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lake), "gone", "30"], stdout=subprocess.PIPE, text=True)
    server = Server(lake, tmp_path / "server.log", KEY)
    remote = RemoteLake(server.url, api_key=KEY)
    try:
        assert holder.stdout.readline().strip() == "held"
        for dropper in (opened, remote):
            with pytest.raises(CorpusBusy, match="being written by .*a build of the test"):
                dropper.drop_corpus("gone")
        assert "gone" in {c.name for c in opened.corpora()}  # refused: nothing removed
        assert opened.get_documents("gone", ["a"])[0].id == "a"
        holder.kill()
        holder.wait()
        assert remote.drop_corpus("gone") is True
        assert remote.drop_corpus("gone") is False  # a second drop finds nothing
        assert "gone" not in {c.name for c in opened.corpora()}
        assert not (lake / "writes" / "gone").exists() and not list(lake.glob("**/corpus=gone"))
        with pytest.raises(UnknownName):
            opened.search("gone", "rrf", "dropped note", k=1)
        opened.create_corpus("gone")  # the name is free again, and empty
        assert opened.search("gone", "rrf", "dropped note", k=1).hits == []

        late: list = []  # a write encoded before the drop and appended after it is refused: it cannot bring the corpus back
        encoded, dropped, encode = threading.Event(), threading.Event(), opened.searchers.encoded_write

        def encode_then_wait(corpus: str, documents: list[dict]):
            keep = encode(corpus, documents)
            encoded.set()
            dropped.wait(60)  # the drop lands between this write's encoding and its append
            return keep

        opened.searchers.encoded_write = encode_then_wait

        def write() -> None:
            try:
                late.append(opened.upsert("gone", [{"id": "late", "text": "A late note about the mooring."}]))
            except UnknownName as error:
                late.append(error)

        writer = threading.Thread(target=write)
        writer.start()
        assert encoded.wait(60)
        assert opened.drop_corpus("gone") is True
        dropped.set()
        writer.join()
        opened.searchers.encoded_write = encode
        assert isinstance(late[0], UnknownName) and "was dropped while this write was made" in str(late[0]), late
        opened.create_corpus("gone")
        assert opened.document_ids("gone") == [] and not list((lake / "writes" / "gone").glob("*.json"))
    finally:
        holder.kill()
        remote.close()
        server.stop()
