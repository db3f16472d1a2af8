"""The index layer: the declared index kinds (``kinds``) and the stored kinds' declarations
(``stored``); one committed snapshot's tables and models (``snapshot``), the indexes over it loaded
through the kinds and the structures derived from them (``index_set``, ``derived``), its query
encoders (``encoders``), a lake-owned corpus's pending writes as a fresh segment (``fresh``), and
GRASP's knowledge bases (``skb``, ``skb_stage_one``)."""
