"""Numeric kernels, one subpackage per family: arrays in, arrays out, no storage or orchestration.

``text`` (BM25, encoders, chunking, entities, triples, citations), ``graph`` (SPRIG's and GraphER's
propagation, seeds and networks), ``hybrid`` (Allan-Poe's index), ``plan`` (GRASP's plans, their SQL,
fusion and knowledge bases), ``rerank`` (the cross-encoder and the GAR/FastInsight loops), ``eval``
(metrics, Topological Recall). A kernel imports only kernels and ``graphlake.common``.
"""
