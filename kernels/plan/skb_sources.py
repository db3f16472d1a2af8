"""The knowledge bases GRASP can build over a corpus (``skb_builders.py`` builds each), named apart
from their builders so that a corpus's declaration (``warehouse/linking.py``) checks a name cheaply."""

SOURCES = ("sql_schema", "wiki_rules", "wiki_evidence", "entities")
