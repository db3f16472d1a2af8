"""A lake-owned corpus's writes between two folds, as searches read them: the log replayed into a fresh
segment (``segment.py``: its nodes chunked by the build's own function, encoded by the corpus's models,
and the tables hits cite) and merged into a method's ranking (``merge.py``). The log and its replay are
the warehouse's (``warehouse/write_log.py``); which segment a search reads is the searcher manager's."""
