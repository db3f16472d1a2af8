"""Text-to-SQL benchmarks (Spider, BIRD) as table-retrieval corpora.

Each table is a document whose text is its schema, so a retriever can match a question to it; a
question's gold is the set of tables its gold SQL reads. The SQL is parsed, not pattern-matched, so
tables inside subqueries, joins and set operations count and CTE names do not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from graphlake.warehouse.readers.base import (
    CorpusBuilder,
    Ingested,
    IngestError,
    Location,
    ReadRequest,
    find_file,
    load_json,
    require,
    split_from_name,
)


def read_spider(request: ReadRequest) -> Ingested:
    """Spider: ``tables.json`` + ``dev.json``; questions have no id, so their position in the file is one."""
    builder = CorpusBuilder()
    lookup = add_schemas(builder, find_file(request.path, "tables.json"))
    questions = request.queries or find_file(request.path, "dev.json")
    split = request.split or split_from_name(questions)
    for index, record in enumerate(_records(questions)):
        _add_question(builder, lookup, Location(questions), f"{split}-{index:04d}", record, "query", split, {})
    return builder.build()


def read_bird(request: ReadRequest) -> Ingested:
    """BIRD: ``dev_tables.json`` + ``dev.json``; ``evidence`` is a hint for SQL writers, kept out of the query text."""
    builder = CorpusBuilder()
    lookup = add_schemas(builder, find_file(request.path, "dev_tables.json"))
    questions = request.queries or find_file(request.path, "dev.json")
    split = request.split or split_from_name(questions)
    for record in _records(questions):
        query_id = require(record, "question_id", Location(questions))
        extra = {key: record[key] for key in ("evidence", "difficulty") if key in record}
        _add_question(builder, lookup, Location(questions), query_id, record, "SQL", split, extra)
    return builder.build()


def add_schemas(builder: CorpusBuilder, tables_file: Path) -> dict[str, dict[str, str]]:
    """Add one document per table of a Spider-format ``tables.json``, and its foreign keys.

    Returns ``db_id -> {lowercased table name -> doc_id}`` for resolving gold SQL; original names win
    over natural ones because SQL uses originals (Spider's store_1 gives ``artists`` as the natural
    name of ``sqlite_sequence``).
    """
    schemas = load_json(tables_file)
    if not isinstance(schemas, list):
        raise IngestError(tables_file, "expected a JSON list of database schemas")
    lookup: dict[str, dict[str, str]] = {}
    for schema in schemas:
        db_id = require(schema, "db_id", Location(tables_file))
        where = Location(tables_file, record=db_id)
        if db_id in lookup:
            raise IngestError(where, "database described twice")
        lookup[db_id] = _add_schema(builder, schema, db_id, where)
    return lookup


def _add_schema(builder: CorpusBuilder, schema: dict, db_id: str, where: Location) -> dict[str, str]:
    tables: list[str] = require(schema, "table_names_original", where, list)
    natural_tables: list[str] = require(schema, "table_names", where, list)
    columns: list[list] = require(schema, "column_names_original", where, list)
    natural_columns: list[list] = require(schema, "column_names", where, list)
    types: list[str] = require(schema, "column_types", where, list)
    if len(tables) != len(natural_tables) or not len(columns) == len(natural_columns) == len(types):
        raise IngestError(where, "table_names/table_names_original or column_names/column_names_original/column_types differ in length")
    for entry in columns + natural_columns:
        shaped = isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], str)
        if not (shaped and isinstance(entry[0], int) and -1 <= entry[0] < len(tables)):
            raise IngestError(where, f"column entry {entry!r} should be [table index, name]")
    if not all(isinstance(name, str) for name in tables + natural_tables + types):
        raise IngestError(where, "table names and column types should be strings")
    if len({name.lower() for name in tables}) != len(tables):
        raise IngestError(where, f"table names differ only in case, so SQL cannot tell them apart: {tables}")

    def column(index: Any) -> int:
        """A column index checked to point at a table's column (index 0 is Spider's ``*``)."""
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(columns) or columns[index][0] < 0:
            raise IngestError(where, f"column index {index!r} is not a table column (0..{len(columns) - 1})")
        return index

    primary = {column(i) for key in require(schema, "primary_keys", where, list) for i in (key if isinstance(key, list) else [key])}
    pairs: list[tuple[int, int]] = []
    for pair in require(schema, "foreign_keys", where, list):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise IngestError(where, f"foreign key {pair!r} should be [column index, referenced column index]")
        pairs.append((column(pair[0]), column(pair[1])))
    doc_ids = [f"{db_id}.{name}" for name in tables]
    qualified = [f"{tables[table]}.{name}" for table, name in columns]

    for t, name in enumerate(tables):
        own = [i for i, (table, _) in enumerate(columns) if table == t]
        described = []
        for i in own:
            note = (", primary key" if i in primary else "") + _natural(columns[i][1], natural_columns[i][1], "; ")
            described.append(f"{columns[i][1]} ({types[i]}{note})")
        text = f"Table {name}{_natural(name, natural_tables[t], ' (', ')')} in database {db_id}. Columns: {', '.join(described)}."
        outgoing = [f"{columns[src][1]} references {qualified[dst]}" for src, dst in pairs if columns[src][0] == t]
        incoming = [f"{qualified[src]} references {columns[dst][1]}" for src, dst in pairs if columns[dst][0] == t]
        if outgoing:
            text += f" Foreign keys: {'; '.join(outgoing)}."
        if incoming:
            text += f" Referenced by: {'; '.join(incoming)}."
        names = [columns[i][1] for i in own]
        metadata = {
            "db_id": db_id,
            "table": name,
            "columns": names,
            "column_types": [types[i] for i in own],
            "primary_key": [columns[i][1] for i in own if i in primary],
        }
        builder.add_document(doc_ids[t], doc_ids[t], text, where, metadata)

    for n, (src, dst) in enumerate(pairs):
        if (src, dst) in pairs[:n]:  # Spider's dog_kennels declares one key twice: kept as declared, flagged
            builder.notes.append(f"{where}: foreign key {qualified[src]} -> {qualified[dst]} declared twice")
        builder.add_foreign_key(doc_ids[columns[src][0]], columns[src][1], doc_ids[columns[dst][0]], columns[dst][1], n, where)
    return {name.lower(): doc for name, doc in zip(natural_tables, doc_ids)} | {name.lower(): doc for name, doc in zip(tables, doc_ids)}


def _natural(original: str, natural: str, before: str, after: str = "") -> str:
    """``natural name: ...`` where it differs from the original name: retrievers match questions' wording."""
    return f"{before}natural name: {natural}{after}" if natural.lower() != original.lower() else ""


def gold_tables(sql: str, tables: dict[str, str], where: Location) -> list[str]:
    """Doc ids of the tables ``sql`` reads, in order of first mention; names match case-insensitively as in SQLite."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.SqlglotError as error:
        raise IngestError(where, f"gold SQL does not parse ({str(error).splitlines()[0]}): {sql!r}") from None
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    gold: list[str] = []
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        if name in ctes:
            continue
        if name not in tables:
            raise IngestError(where, f"gold SQL reads {table.name!r}, which is no table of this database: {sql!r}")
        if tables[name] not in gold:
            gold.append(tables[name])
    if not gold:
        raise IngestError(where, f"gold SQL reads no table: {sql!r}")
    return gold


def _records(path: Path) -> list[Any]:
    records = load_json(path)
    if not isinstance(records, list):
        raise IngestError(path, "expected a JSON list of questions")
    return records


def _add_question(
    builder: CorpusBuilder,
    lookup: dict[str, dict[str, str]],
    where: Location,
    query_id: str,
    record: Any,
    sql_field: str,
    split: str,
    extra: dict[str, Any],
) -> None:
    where = where.with_record(query_id)
    db_id = require(record, "db_id", where)
    if db_id not in lookup:
        raise IngestError(where, f"database {db_id!r} is not in the schema file")
    sql = require(record, sql_field, where)
    builder.add_query(query_id, require(record, "question", where), where, split, {"db_id": db_id, "sql": sql, **extra})
    for doc_id in gold_tables(sql, lookup[db_id], where):
        builder.add_qrel(query_id, doc_id, where, 1, split)
