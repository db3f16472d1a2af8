"""Text kernels: BM25, the dense and SPLADE encoders, chunking, entity, triple and citation extraction."""
