"""Allan-Poe's hybrid graph index: fused vectors, the graph build (exact or NN-descent k-NN, pruning),
its batched array path, the knowledge-graph part, search and in-place updates."""
