"""Evaluation kernels: the papers' metrics and FastInsight's Topological Recall."""
