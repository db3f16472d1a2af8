"""Spider/BIRD readers: table documents, foreign keys, and gold tables parsed out of gold SQL."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from graphlake.warehouse.readers.base import CorpusBuilder, Ingested, IngestError, ReadRequest, load_json
from graphlake.warehouse.readers.sql_schemas import add_schemas, read_bird, read_spider

SHOP = {
    "db_id": "shop",
    "table_names_original": ["Customers", "orders", "order_items"],
    "table_names": ["customers", "orders", "order items"],
    "column_names_original": [
        [-1, "*"],
        [0, "customer_id"],
        [0, "Name"],
        [1, "order_id"],
        [1, "customer_id"],
        [2, "order_id"],
        [2, "line_no"],
        [2, "product"],
    ],
    "column_names": [
        [-1, "*"],
        [0, "customer id"],
        [0, "name"],
        [1, "order id"],
        [1, "customer id"],
        [2, "order id"],
        [2, "line number"],
        [2, "product"],
    ],
    "column_types": ["text", "number", "text", "number", "number", "number", "number", "text"],
    "primary_keys": [1, 3, [5, 6]],
    "foreign_keys": [[4, 1], [5, 3]],
}
SCHOOL = {
    "db_id": "school",
    "table_names_original": ["student", "Has_Pet", "pets"],
    "table_names": ["student", "has pet", "pets"],
    "column_names_original": [[-1, "*"], [0, "StuID"], [0, "LName"], [1, "StuID"], [1, "PetID"], [2, "PetID"], [2, "PetType"]],
    "column_names": [[-1, "*"], [0, "student id"], [0, "last name"], [1, "student id"], [1, "pet id"], [2, "pet id"], [2, "pet type"]],
    "column_types": ["text", "number", "text", "number", "number", "number", "text"],
    "primary_keys": [1, 5],
    "foreign_keys": [[3, 1], [4, 5]],
}
QUESTIONS = [  # (db_id, question, gold SQL, gold tables)
    ("shop", "Names of customers with orders?", "SELECT T1.Name FROM Customers AS T1 JOIN orders AS T2 ON T1.customer_id = T2.customer_id", {"shop.Customers", "shop.orders"}),
    ("shop", "Products of customer 1?", "SELECT product FROM order_items WHERE order_id IN (SELECT order_id FROM ORDERS WHERE customer_id = 1)", {"shop.order_items", "shop.orders"}),
    ("shop", "How many big orders?", "WITH big AS (SELECT order_id FROM order_items GROUP BY order_id HAVING count(*) > 2) SELECT count(*) FROM big", {"shop.order_items"}),
    ("school", "Students or pet owners?", 'SELECT StuID FROM "student" UNION SELECT StuID FROM `Has_Pet`', {"school.student", "school.Has_Pet"}),
    ("school", "How many dogs are owned?", 'SELECT count(*) FROM has_pet AS hp JOIN PETS AS p ON hp.PetID = p.PetID WHERE p.PetType = "dog"', {"school.Has_Pet", "school.pets"}),
]


def write_json(path: Path, value: object) -> Path:
    data = json.dumps(value, indent=1).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def spider_folder(tmp_path: Path, questions: list[tuple] = QUESTIONS, schemas: list[dict] = (SHOP, SCHOOL), name: str = "dev.json") -> Path:
    write_json(tmp_path / "tables.json", list(schemas))
    write_json(tmp_path / name, [{"db_id": db, "question": text, "query": sql} for db, text, sql, _ in questions])
    return tmp_path


def gold(result: Ingested) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for row in result.qrels.to_pylist():
        assert row["relevance"] == 1
        found.setdefault(row["query_id"], set()).add(row["doc_id"])
    return found


@pytest.mark.parametrize("name", ["dev.json", "dev.json.gz"])
def test_spider_documents_foreign_keys_and_gold(tmp_path: Path, name: str) -> None:
    folder = spider_folder(tmp_path, name=name)
    result = read_spider(ReadRequest(folder))
    docs = {row["doc_id"]: row for row in result.documents.to_pylist()}
    assert set(docs) == {"shop.Customers", "shop.orders", "shop.order_items", "school.student", "school.Has_Pet", "school.pets"}
    assert docs["shop.orders"]["title"] == "shop.orders"
    assert docs["shop.orders"]["text"] == (
        "Table orders in database shop. Columns: order_id (number, primary key; natural name: order id), "
        "customer_id (number; natural name: customer id). Foreign keys: customer_id references Customers.customer_id. "
        "Referenced by: order_items.order_id references order_id."
    )
    assert docs["shop.order_items"]["text"].startswith("Table order_items (natural name: order items) in database shop.")
    assert json.loads(docs["shop.order_items"]["metadata"]) == {
        "db_id": "shop",
        "table": "order_items",
        "columns": ["order_id", "line_no", "product"],
        "column_types": ["number", "number", "text"],
        "primary_key": ["order_id", "line_no"],
        "source": str(folder / "tables.json"),  # the file it was read from: what a hit cites
    }
    assert result.foreign_keys.to_pylist() == [
        {"src_doc_id": "shop.orders", "src_column": "customer_id", "dst_doc_id": "shop.Customers", "dst_column": "customer_id", "position": 0},
        {"src_doc_id": "shop.order_items", "src_column": "order_id", "dst_doc_id": "shop.orders", "dst_column": "order_id", "position": 1},
        {"src_doc_id": "school.Has_Pet", "src_column": "StuID", "dst_doc_id": "school.student", "dst_column": "StuID", "position": 0},
        {"src_doc_id": "school.Has_Pet", "src_column": "PetID", "dst_doc_id": "school.pets", "dst_column": "PetID", "position": 1},
    ]
    assert gold(result) == {f"dev-{i:04d}": tables for i, (*_, tables) in enumerate(QUESTIONS)}
    query = result.queries.to_pylist()[3]
    assert (query["text"], query["split"]) == ("Students or pet owners?", "dev")
    assert json.loads(query["metadata"]) == {"db_id": "school", "sql": QUESTIONS[3][2]}


def test_spider_other_questions_file_sets_split_and_ids(tmp_path: Path) -> None:
    folder = spider_folder(tmp_path, QUESTIONS[:1], name="train_spider.json")
    result = read_spider(ReadRequest(folder, queries=folder / "train_spider.json"))
    assert gold(result) == {"train-0000": {"shop.Customers", "shop.orders"}}
    assert result.queries.column("split").to_pylist() == ["train"]


def test_lookup_resolves_original_and_natural_names_original_first(tmp_path: Path) -> None:
    swapped = {**SCHOOL, "table_names": ["pets", "has pet", "student"]}  # as Spider's store_1 swaps two natural names
    lookup = add_schemas(CorpusBuilder(), write_json(tmp_path / "tables.json", [SHOP, swapped]))
    assert lookup["shop"]["order items"] == lookup["shop"]["order_items"] == "shop.order_items"
    assert lookup["shop"]["customers"] == "shop.Customers"
    assert (lookup["school"]["pets"], lookup["school"]["student"], lookup["school"]["has pet"]) == ("school.pets", "school.student", "school.Has_Pet")


def test_duplicate_foreign_key_declaration_is_kept_as_declared_with_a_note(tmp_path: Path) -> None:
    builder = CorpusBuilder()
    add_schemas(builder, write_json(tmp_path / "tables.json", [{**SHOP, "foreign_keys": [[4, 1], [4, 1]]}]))
    assert builder.build().foreign_keys.column("position").to_pylist() == [0, 1]
    assert builder.notes and "declared twice" in builder.notes[0] and "'shop'" in builder.notes[0]


def test_bird_questions_ids_evidence_and_composite_keys(tmp_path: Path) -> None:
    write_json(tmp_path / "dev_tables.json", [SHOP])
    write_json(
        tmp_path / "dev.json.gz",
        [
            {
                "question_id": 7,
                "db_id": "shop",
                "question": "Lines of order 3?",
                "evidence": "line = order_items row",
                "SQL": "SELECT COUNT(*) FROM `order_items` WHERE order_id = 3",
                "difficulty": "simple",
            },
            {
                "question_id": 9,
                "db_id": "shop",
                "question": "Who ordered most?",
                "evidence": "",
                "SQL": "SELECT c.Name FROM customers c JOIN (SELECT customer_id, COUNT(*) n FROM Orders GROUP BY customer_id) o ON c.customer_id = o.customer_id ORDER BY o.n DESC LIMIT 1",
                "difficulty": "moderate",
            },
        ],
    )
    result = read_bird(ReadRequest(tmp_path))
    assert gold(result) == {"7": {"shop.order_items"}, "9": {"shop.Customers", "shop.orders"}}
    first = result.queries.to_pylist()[0]
    assert first["text"] == "Lines of order 3?"
    assert json.loads(first["metadata"]) == {
        "db_id": "shop",
        "sql": "SELECT COUNT(*) FROM `order_items` WHERE order_id = 3",
        "evidence": "line = order_items row",
        "difficulty": "simple",
    }
    assert json.loads(result.documents.to_pylist()[2]["metadata"])["primary_key"] == ["order_id", "line_no"]


# ---------------------------------------------------------------- bad input


def test_gold_naming_an_unknown_table_names_the_question(tmp_path: Path) -> None:
    folder = spider_folder(tmp_path, [*QUESTIONS[:2], ("shop", "Refunds?", "SELECT * FROM refunds JOIN orders", set())])
    with pytest.raises(IngestError, match=r"dev-0002.*'refunds'.*no table"):
        read_spider(ReadRequest(folder))


def test_gold_from_another_database_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"dev-0000.*'pets'"):
        read_spider(ReadRequest(spider_folder(tmp_path, [("shop", "Pets?", "SELECT * FROM pets", set())])))


def test_unparseable_gold_sql_names_the_question(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"dev-0000.*does not parse \(.*Line 1"):
        read_spider(ReadRequest(spider_folder(tmp_path, [("shop", "Broken?", "SELECT * FROM", set())])))


def test_gold_sql_reading_no_table_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"dev-0000.*reads no table"):
        read_spider(ReadRequest(spider_folder(tmp_path, [("shop", "One?", "SELECT 1", set())])))


def test_bird_unknown_table_names_the_question_id(tmp_path: Path) -> None:
    write_json(tmp_path / "dev_tables.json", [SHOP])
    write_json(tmp_path / "dev.json", [{"question_id": 42, "db_id": "shop", "question": "?", "SQL": "SELECT * FROM ghosts"}])
    with pytest.raises(IngestError, match=r"'42'.*'ghosts'"):
        read_bird(ReadRequest(tmp_path))


def test_foreign_key_index_out_of_range_names_file_and_db(tmp_path: Path) -> None:
    folder = spider_folder(tmp_path, schemas=[SHOP, {**SCHOOL, "foreign_keys": [[3, 99]]}])
    with pytest.raises(IngestError, match=r"tables\.json \(id 'school'\).*column index 99"):
        read_spider(ReadRequest(folder))


def test_missing_schema_key_names_file_and_db(tmp_path: Path) -> None:
    schema = {key: value for key, value in SHOP.items() if key != "primary_keys"}
    with pytest.raises(IngestError, match=r"tables\.json \(id 'shop'\).*missing field 'primary_keys'"):
        add_schemas(CorpusBuilder(), write_json(tmp_path / "tables.json", [schema]))


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    folder = spider_folder(tmp_path)
    (folder / "dev.json").write_text('[\n {"db_id": "shop",\n  "question": oops}\n]\n')
    with pytest.raises(IngestError, match=r"dev\.json:3: malformed JSON"):
        read_spider(ReadRequest(folder))


# ---------------------------------------------------------------- real data


def assert_every_question_has_gold(result: Ingested) -> None:
    assert set(result.qrels.column("query_id").to_pylist()) == set(result.queries.column("query_id").to_pylist())


@pytest.mark.datasets
def test_real_spider(datasets_dir: Path) -> None:
    folder = datasets_dir / "spider"
    if not folder.is_dir():
        pytest.skip(f"Spider not staged at {folder}")
    schemas = load_json(folder / "tables.json.gz")
    assert len(schemas) == 166
    assert sum(len(schema["foreign_keys"]) for schema in schemas) == 849
    result = read_spider(ReadRequest(folder))
    assert result.documents.num_rows == 876
    # dog_kennels declares Dogs.owner_id -> Owners.owner_id twice: 849 declarations, 848 distinct pairs.
    assert result.foreign_keys.num_rows == 849
    pairs = result.foreign_keys.select(["src_doc_id", "src_column", "dst_doc_id", "dst_column"]).to_pylist()
    assert len({tuple(p.values()) for p in pairs}) == 848
    assert len(result.notes) == 1 and "dog_kennels" in result.notes[0]
    assert result.queries.num_rows == 1034
    assert result.qrels.num_rows == 1565
    assert_every_question_has_gold(result)


@pytest.mark.datasets
def test_real_bird(datasets_dir: Path) -> None:
    folder = datasets_dir / "bird"
    if not folder.is_dir():
        pytest.skip(f"BIRD not staged at {folder}")
    result = read_bird(ReadRequest(folder))
    assert result.documents.num_rows == 75
    assert len({json.loads(meta)["db_id"] for meta in result.documents.column("metadata").to_pylist()}) == 11
    assert result.foreign_keys.num_rows == 102
    assert result.queries.num_rows == 1534
    assert result.qrels.num_rows == 2978
    assert_every_question_has_gold(result)
