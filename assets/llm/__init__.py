"""Assets that ask an LLM (``$GRAPHLAKE_LLM_BASE_URL``): entities and triples per node. Their own group, ``llm``, so
jobs that must run anywhere (``graphlake demo``, CI) leave them out with ``AssetSelection.groups("llm")``; they
fail at once, saying so, without a server.

The group is this package's name, given where it is loaded (``pipelines/definitions.py``)."""
