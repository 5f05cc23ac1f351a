"""The limits every P3109 format's studies use (issue 43), against gfloat 0.5: ``maxexp``
(the MX shared exponent's ``emax = maxexp - 1``), the overflow threshold beyond which
saturation changes a value, and the saturated counts of ``error_metrics``.  The MX blocks
themselves are checked against gfloat's ``quantize_block`` in test_study_scale_modes.py."""

import math

import numpy as np
import pytest

from fp8kit import study
from fp8kit._kernels.metrics import overflow_threshold
from fp8kit.formats import P3109_FORMATS, p3109_name

gfloat = pytest.importorskip("gfloat")
from gfloat import Domain, RoundMode, Signedness, round_float  # noqa: E402
from gfloat.formats import format_info_p3109  # noqa: E402


def gfloat_format(fmt):
    name = p3109_name(fmt)
    k, rest = name.removeprefix("p3109_k").split("p")
    return format_info_p3109(
        int(k), int(rest[:-2]), Signedness.Signed if rest[-2] == "s" else Signedness.Unsigned,
        Domain.Extended if rest[-1] == "e" else Domain.Finite,
    )  # fmt: skip


def overflows(fi, v: float) -> bool:
    """Whether gfloat's round to nearest even without saturation leaves the range."""
    try:
        r = round_float(fi, v, RoundMode.TiesToEven, sat=False)
    except ValueError:  # (a finite format without NaN)
        return True
    return not math.isfinite(r)


@pytest.mark.parametrize("fmt", [pytest.param(f, id=p3109_name(f)) for f in P3109_FORMATS])
def test_limits_and_saturation_counts_match_gfloat(fmt):
    fi = gfloat_format(fmt)
    assert (fmt.maxexp, fmt.maxexp - 1) == (fi.maxexp, fi.emax)
    ovf, tie_up = overflow_threshold(fmt)
    below, above = np.nextafter(ovf, 0.0), np.nextafter(ovf, np.inf)
    assert not overflows(fi, below) and overflows(fi, above)
    assert overflows(fi, ovf) == tie_up
    # the counts: values around the threshold and the max, quantized unscaled
    x = np.array([fmt.max, below, ovf, above, 2 * ovf, fi.max / 2])
    q = study.quantize(x, fmt, "none")
    m = study.error_metrics(x, q, fmt=fmt)
    assert m.n_saturated == sum(overflows(fi, v) for v in x)
