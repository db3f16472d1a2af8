"""Reranking: the cross-encoder (training and scoring) and the GAR / FastInsight adaptive loops around it."""
