"""Comparing study rows across code paths (chunk budgets, Dask, schedulers)."""

import pytest

#: The float sums of a row: equal to ``rel`` (summation order differs between paths).
SUMS = ("sqnr_db", "rmse", "sum_sq_error", "sum_sq_signal", "crest", "group_crest")


def same_rows(got, ref, rel=1e-12):
    """Equal rows: counts, maxima, scales and notes exactly, float sums to ``rel``."""
    assert len(got) == len(ref)
    for g, r in zip(got, ref, strict=True):
        dg, dr = g.as_dict(), r.as_dict()
        for k in SUMS:
            a, b = dg.pop(k), dr.pop(k)
            assert a == b or a == pytest.approx(b, rel=rel), (r.tensor, r.scaling, k)
        assert dg == dr
