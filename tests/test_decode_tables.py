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
    """Values float32 cannot hold (exponent range beyond float32's) take the kernel: the
    table still equals a single rounding from the exact value."""
    wide = FloatFormat(name="e9m6_test", exponent_bits=9, mantissa_bits=6, bias=255,
                       specials="ieee")  # fmt: skip
    values = tables.code_values(wide)
    assert not tables._exact_in_float32(values)
    for out_dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        table = tables.decode_table(wide, out_dtype)
        finite = ~np.isnan(values)
        want = _kernel_bits(values, out_dtype)
        assert np.array_equal(table[: values.size][finite], want[finite])
