"""The index layer: the declared index kinds (``kinds``), one corpus's indexes loaded through them
(``lake``), the stored kinds' declarations (``stored``, imported here so that they are always
declared) and GRASP's knowledge bases (``skb``)."""

from graphlake.retrieval.index import stored  # noqa: F401  (declares the stored kinds)
