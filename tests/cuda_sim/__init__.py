"""Tests of fp8kit.cuda that run under the CUDA simulator (see conftest.py)."""
