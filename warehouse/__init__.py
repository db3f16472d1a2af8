"""The lakehouse: table contracts, atomic Parquet storage, the DuckDB catalog, corpus registry."""
