"""Numba CPU kernels.  Nothing here compiles at import: factories build kernels on first use."""
