"""The index layer: the declared index kinds (``kinds``) and the stored kinds' declarations
(``stored``), a corpus's tables (``tables``) and its indexes loaded through the kinds
(``corpus_indexes``), and GRASP's knowledge bases (``skb``, ``skb_stage_one``)."""
