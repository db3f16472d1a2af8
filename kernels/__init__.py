"""Numeric kernels, one subpackage per family: arrays in, arrays out, no storage or orchestration.

``text`` (BM25, encoders, chunking, entities, triples, citations), ``graph`` (SPRIG's and GraphER's
propagation, seeds and networks), ``hybrid`` (Allan-Poe's index), ``plan`` (GRASP's plans, their SQL,
fusion and knowledge bases), ``rerank`` (the cross-encoder and the GAR/FastInsight loops), ``eval``
(metrics, Topological Recall). A kernel imports only kernels and ``graphlake.common``.

Every search kernel (BM25, the hybrid graph's CPU walk, its batched array search and its CUDA kernel)
takes a batch of queries and returns ``(scores, rows)`` of shape ``(queries, k)``, best first, with the
fill ``results.py`` documents, as faiss's ``search(x, k)`` returns ``(D, I)``.
"""
