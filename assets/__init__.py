"""Software-defined assets, thin: read tables, call readers/kernels, write tables plus metadata."""
