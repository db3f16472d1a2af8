"""Graph propagation (SPRIG's PPR over the entity graph, GraphER's GCS), seed weighting, GraphER's GAT/MLP rankers."""
