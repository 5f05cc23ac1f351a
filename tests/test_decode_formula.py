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


def test_other_output_dtypes_match_the_table():
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


SUB_BYTE = ["float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "p3109_k4p2sf", "p3109_k7p3ue"]


@pytest.mark.parametrize("fmt", SUB_BYTE)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_sub_byte_codes_out_of_range_raise(fmt, dtype):
    """The range check of sub-byte codes held in uint8 is the decode kernel's (float32 by
    the formula) or numpy's before the table kernel: the same error either way, for a bad
    code anywhere, also in the last chunk of a threaded call."""
    f = fp8kit.get_format(fmt)
    n = (1 << 18) + 7
    for pos in (0, 5, n // 2, n - 1):
        for bad in (1 << f.bits, 255):
            codes = np.arange(n, dtype=np.uint8) & np.uint8((1 << f.bits) - 1)
            codes[pos] = bad
            for size in (n, pos + 1):
                with fp8kit.num_threads(2):
                    with pytest.raises(
                        ValueError, match=rf"codes\[{pos}\] = {bad} is not a code of {fmt}"
                    ):
                        fp8kit.decode(codes[:size], fmt, dtype=dtype)
    out = np.empty((3, 2), np.float32)
    codes = np.uint8([[0, 1], [2, 3], [1 << f.bits, 4]])
    with pytest.raises(ValueError, match=rf"codes\[2, 0\] = {1 << f.bits} is not a code"):
        fp8kit.decode(codes, fmt, dtype=dtype if dtype == np.float32 else None, out=out)
    # (out= may have been written: the valid codes decoded; see decode's docstring)
    good = codes.copy()
    good[2, 0] = 0
    np.testing.assert_array_equal(out[:2], fp8kit.decode(good, fmt)[:2])


def test_sub_byte_codes_in_range_every_code_and_uint16_width():
    """Every code of a sub-byte format decodes (no false alarm from the kernel's check), and
    a 10-bit format's uint16 codes are checked by the same kernel."""
    for fmt in SUB_BYTE:
        f = fp8kit.get_format(fmt)
        codes = np.arange(1 << f.bits, dtype=np.uint8)
        want = decode_table(f, np.float32)[: codes.size]
        np.testing.assert_array_equal(fp8kit.decode(codes, fmt).view(np.uint32), want)
    f10 = FloatFormat(name="t_e5m4", exponent_bits=5, mantissa_bits=4, bias=15, specials="fn")
    codes = np.arange(1 << 10, dtype=np.uint16)
    assert decode_f32_kernel(f10, codes.dtype) is not None
    want = decode_table(f10, np.float32)[: codes.size]
    np.testing.assert_array_equal(fp8kit.decode(codes, f10).view(np.uint32), want)
    codes[700] = 1 << 10
    with pytest.raises(ValueError, match=r"codes\[700\] = 1024 is not a code of t_e5m4"):
        fp8kit.decode(codes, f10)
