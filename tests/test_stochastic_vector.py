"""Stochastic rounding of float32, bfloat16 and float16 to formats of up to 8 bits runs a kernel
of LLVM vector code (fp8kit._kernels.stochastic, issue 16: 0.5-0.6 s less to compile, and
one compiled function for every input dtype); it must give the bits of the Numba kernel it
replaces, whose words and results the rounding tests check against gfloat and the rule
itself: for every format it takes, input dtype, random-bit count and saturation, to codes
and to values, any chunking, and blocks that start inside an array (Dask blocks)."""

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit._kernels.codec import dummy, encode_mode_kernel
from fp8kit._kernels.decode import format_planes
from fp8kit._kernels.rounding import STOCHASTIC
from fp8kit._kernels.tables import decode_table
from fp8kit.formats import registered_formats

F32 = np.dtype(np.float32)
BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
KEY = np.array([0x89ABCDEF, 0x01234567], np.uint32)
KEY.flags.writeable = False  # (as the kernels' signatures take them)
VECTOR = sorted(
    f.name
    for f in registered_formats().values()
    if f.bits <= 8 and encode_mode_kernel(f, F32, True, STOCHASTIC, 8)[0]._key[0] == "sr_vec"
)


def _inputs():
    """Every sign, exponent and upper mantissa (top 16 bits) with low halves at and around
    the ties of every 8-bit format's rounding (and random ones): ~400K float32 values,
    specials and subnormals included."""
    rng = np.random.default_rng(16)
    lows = np.array([0, 1, 0x7FFF, 0x8000, 0xFFFF] + list(rng.integers(0, 1 << 16, 1)), np.uint32)
    bits = ((np.arange(1 << 16, dtype=np.uint32)[:, None] << 16) | lows).ravel()
    bits = rng.permutation(bits)
    bits.flags.writeable = False
    return bits


X = _inputs()
# 16-bit inputs: every code, twice (in two orders: other random words)
_rng = np.random.default_rng(17)
X16 = np.concatenate([_rng.permutation(1 << 16) for _ in range(2)]).astype(np.uint16)
X16.flags.writeable = False


def _run(kernel, x, values, fmt, dt, offset, nchunks):
    table = dummy(np.uint8)
    bits = np.uint32 if dt == F32 else np.uint16
    if values:  # (the table's byte planes, or where the kernel reads entries, the table)
        table = format_planes(fmt, dt) if kernel.planes else decode_table(fmt, dt).view(bits)
    out = np.zeros(x.size, bits if values else np.uint8)
    kernel.build()(x, dummy(np.uint32), table, out, KEY, offset, nchunks)
    return out


def test_the_vector_kernel_serves_the_signed_and_unsigned_formats():
    assert {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "p3109_k8p3se"} <= set(VECTOR)
    assert "p3109_k8p3ue" in VECTOR and "float8_e8m0fnu" not in VECTOR
    assert {"float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"} <= set(VECTOR)


@pytest.mark.parametrize("values", [False, True], ids=["codes", "values"])
@pytest.mark.parametrize("dt", [F32, BF16, F16], ids=["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", VECTOR)
def test_vector_stochastic_rounding_equals_the_numba_kernel(name, dt, values):
    fmt = fp8kit.get_format(name)
    if values and format_planes(fmt, dt) is None:
        pytest.skip("no AVX512-VBMI here: round_to takes the Numba kernel")  # pragma: no cover
    table = np.dtype(np.uint32 if dt == F32 else np.uint16) if values else None
    xs = X if dt == F32 else X16
    cases = ((0, xs.size, 1), (12345, 100_001, 3), (7, 70, 1))
    for bits in (4, 8, 13, 16):
        for saturate in (True, False):
            args = (fmt, dt, saturate, STOCHASTIC, bits, table)
            vec = encode_mode_kernel(*args, planes=values)[0]
            ref = encode_mode_kernel(*args, planes=values, vector=False)[0]
            assert vec._key[0] == "sr_vec" and ref._key[0] == "mode"
            for offset, size, nchunks in cases if dt == F32 else cases[1:]:
                x = xs[:size]
                got = _run(vec, x, values, fmt, dt, offset, nchunks)
                want = _run(ref, x, values, fmt, dt, offset, nchunks)
                assert got.tolist() == want.tolist(), (bits, saturate, offset, size, nchunks)


def test_one_compiled_kernel_serves_every_input_dtype_and_round_to():
    """float32, bfloat16 and float16 data, to codes and to values, share the vector kernel's
    compiled function: a further input dtype in a warm process compiles nothing."""
    fmt = fp8kit.get_format("float8_e4m3fn")
    keys = set()
    for dt in (F32, BF16, F16):
        keys.add(encode_mode_kernel(fmt, dt, True, STOCHASTIC, 8)[0]._key)
        table = np.dtype(np.uint32 if dt == F32 else np.uint16)
        keys.add(encode_mode_kernel(fmt, dt, True, STOCHASTIC, 8, table, planes=True)[0]._key)
    assert len(keys) == 1
