"""Decoding to float32 by the fields' formula (fp8kit._kernels.decode) gives, for every code
of every registered format, exactly the bits of the decode table."""

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit._kernels.codec import dummy, lookup_kernel
from fp8kit._kernels.decode import decode_f32_kernel, decode_params
from fp8kit._kernels.tables import decode_table
from fp8kit.formats import FloatFormat, registered_formats

FORMATS = list(registered_formats().values())
# bfloat16 -> float32 is a shift of its own; the P3109 binary8p1 unsigned formats have a
# float32 subnormal (2**-127) at code 1, which the formula does not make: they keep the table
TABLE_ONLY = {"bfloat16", "p3109_k8p1ue", "p3109_k8p1uf"}


def _codes(fmt):
    return np.arange(1 << fmt.bits, dtype=fmt.code_dtype)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_formula_kernel_matches_table_on_every_code(fmt):
    kernel = decode_f32_kernel(fmt, fmt.code_dtype)
    assert (kernel is None) == (fmt.name in TABLE_ONLY)
    codes = _codes(fmt)
    want = decode_table(fmt, np.float32)[: codes.size]
    if kernel is None:
        return
    out = np.empty(codes.size, np.uint32)
    kernel.serial(codes, dummy(np.uint32), dummy(np.uint32), out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_public_decode_to_float32_matches_table_kernel(fmt):
    """Through fp8kit.decode, on every code repeated past the threading threshold (several
    chunks), against the table kernel on the same codes."""
    codes = np.tile(_codes(fmt), (1 << 18) // (1 << fmt.bits) + 3)[: (1 << 18) + 5]
    got = fp8kit.decode(codes, fmt).view(np.uint32)
    table = decode_table(fmt, np.float32)
    want = np.empty(codes.size, np.uint32)
    lookup_kernel(codes.dtype, table.dtype).serial(codes, dummy(np.uint32), table, want)
    np.testing.assert_array_equal(got, want)
    if fmt.dtype is not None:  # the ml_dtypes array of the same codes
        got = fp8kit.decode(codes.view(fmt.dtype)).view(np.uint32)
        np.testing.assert_array_equal(got, want)


def test_other_output_dtypes_keep_the_table():
    codes = _codes(fp8kit.get_format("float8_e4m3fn"))
    for dt in (np.float16, ml_dtypes.bfloat16, np.float64):
        got = fp8kit.decode(codes, "float8_e4m3fn", dtype=dt)
        table = decode_table(fp8kit.get_format("float8_e4m3fn"), np.dtype(dt))
        np.testing.assert_array_equal(got.view(table.dtype), table)


@pytest.mark.parametrize(
    "fmt",
    [
        FloatFormat(name="t_e3m4_fn", exponent_bits=3, mantissa_bits=4, bias=3, specials="fn"),
        FloatFormat(name="t_e6m1", exponent_bits=6, mantissa_bits=1, bias=40, specials="ieee"),
        FloatFormat(name="t_e5m2_fnuz", exponent_bits=5, mantissa_bits=2, bias=20, specials="fnuz"),
        FloatFormat(name="t_e7m0u", exponent_bits=7, mantissa_bits=0, bias=70, specials="unsigned"),
        FloatFormat(name="t_e5m10", exponent_bits=5, mantissa_bits=10, bias=15, specials="ieee"),
        # subnormals below float32's normal range: the table keeps it
        FloatFormat(name="t_e7m8", exponent_bits=7, mantissa_bits=8, bias=120, specials="fn"),
    ],
    ids=lambda f: f.name,
)
def test_unregistered_formats_formula_or_table(fmt):
    """A format that is not registered decodes exactly too: by the formula where the check
    against its table passes, else by the table."""
    codes = _codes(fmt)
    want = decode_table(fmt, np.float32)[: codes.size]
    np.testing.assert_array_equal(fp8kit.decode(codes, fmt).view(np.uint32), want)
    if fmt.name == "t_e7m8":
        assert decode_params(fmt) is None
        assert decode_f32_kernel(fmt, codes.dtype) is None
