"""Decode tables to float16 and bfloat16 are computed by numpy/ml_dtypes from float32, not by
the float64 encode kernel (a cold first call compiled that kernel for a table): the bits
must be the kernel's, for every code of every registered format."""

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit._kernels import tables
from fp8kit._kernels.codec import bits_dtype, dummy, encode_kernel
from fp8kit.formats import FloatFormat, get_format


def _kernel_bits(values: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
    """Each value rounded once (nearest-even, overflow to Inf) by the float64 kernel."""
    kernel, _ = encode_kernel(get_format(out_dtype), np.dtype(np.float64), False)
    bits = np.empty(values.size, bits_dtype(out_dtype))
    kernel.serial(values.view(np.uint64), dummy(np.uint32), dummy(np.uint8), bits)
    return bits


@pytest.mark.parametrize("out_dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_tables_equal_the_kernels_rounding(out_dtype):
    out_dtype = np.dtype(out_dtype)
    for name in fp8kit.registered_formats():
        fmt = get_format(name)
        values = tables.code_values(fmt)
        table = tables.decode_table(fmt, out_dtype)
        want = _kernel_bits(values, out_dtype)
        finite = ~np.isnan(values)
        assert np.array_equal(table[: values.size][finite], want[finite]), name
        # NaN codes: the canonical quiet NaN with the code's sign
        sign = np.signbit(values[~finite])
        qnan = tables._QNAN[out_dtype]
        top = 1 << (8 * out_dtype.itemsize - 1)
        assert np.array_equal(table[: values.size][~finite], np.where(sign, qnan | top, qnan))


def test_a_format_wider_than_float32_still_rounds_once():
    """Values float32 cannot hold (exponent range beyond float32's) are rounded on float64
    (tables._round_once, no kernel compiled): the table still equals a single rounding
    from the exact value."""
    wide = FloatFormat(name="e9m6_test", exponent_bits=9, mantissa_bits=6, bias=255,
                       specials="ieee")  # fmt: skip
    values = tables.code_values(wide)
    assert not tables._exact_in_float32(values)
    for out_dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        table = tables.decode_table(wide, out_dtype)
        finite = ~np.isnan(values)
        want = _kernel_bits(values, out_dtype)
        assert np.array_equal(table[: values.size][finite], want[finite])


@pytest.mark.parametrize("out_dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_round_once_equals_the_kernel_at_every_midpoint(out_dtype):
    """tables._round_once: every finite value of the 16-bit type, every midpoint between
    neighbours (and beyond the largest: overflow), their float64 neighbours, values far
    below the smallest subnormal and beyond the range, specials; both signs."""
    out_dtype = np.dtype(out_dtype)
    top = 0x7C00 if out_dtype == np.float16 else 0x7F80
    values = np.arange(top, dtype=np.uint16).view(out_dtype).astype(np.float64)
    upper = np.append(values[1:], values[-1] * 2)
    mid = (values + upper) / 2
    probes = np.concatenate([values, mid, np.nextafter(mid, 0), np.nextafter(mid, np.inf),
                             [1e-300, 2.0**-200, 1e300, np.inf, np.nan]])  # fmt: skip
    probes = np.concatenate([probes, -probes])
    got = tables._round_once(probes, get_format(out_dtype)).view(bits_dtype(out_dtype))
    want = _kernel_bits(probes, out_dtype)
    finite = ~np.isnan(probes)
    np.testing.assert_array_equal(got[finite], want[finite])
    assert np.isnan(got[~finite].view(out_dtype).astype(np.float32)).all()
