"""Numeric kernels and retrieval operators: arrays in, arrays out, no storage or orchestration."""
