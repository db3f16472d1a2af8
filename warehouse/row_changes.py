"""What a new version of a partition changed: rows added, changed and removed against the committed
version, matched by the table's key (``warehouse/tables.py``). An asset's materialization reports
these, so an incremental reindex shows what an edit reached."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from graphlake.common.scratch_sql import scratch_cursor


def row_changes(previous: pa.Table | None, current: pa.Table, key: Sequence[str]) -> dict[str, int]:
    """``{"added", "changed", "removed"}`` row counts; a row is changed when any column's value differs."""
    if previous is None:
        return {"added": current.num_rows, "changed": 0, "removed": 0}
    columns = ", ".join(f'"{column}"' for column in key)
    with scratch_cursor() as con:
        con.register("previous", previous)
        con.register("current", current)
        added, changed, removed = con.execute(
            f"""
            WITH o AS (SELECT {columns}, hash(o) AS digest FROM previous o),
                 n AS (SELECT {columns}, hash(n) AS digest FROM current n)
            SELECT count(*) FILTER (WHERE o.digest IS NULL),
                   count(*) FILTER (WHERE o.digest IS NOT NULL AND n.digest IS NOT NULL AND o.digest <> n.digest),
                   count(*) FILTER (WHERE n.digest IS NULL)
            FROM o FULL JOIN n USING ({columns})
            """
        ).fetchone()
    return {"added": added, "changed": changed, "removed": removed}
