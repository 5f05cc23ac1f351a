"""The encode kernels' lean rounding (bits.encode_lean, issue 16) against encode_fast, the
rounding it replaces where :func:`fp8kit._kernels.codec.lean_params` allows: the same codes
for every format, both source widths, every saturate option, encode and round-to."""

import numpy as np
import pytest
from conftest import USER_FORMATS
from test_exact_reference import float64_boundaries

import fp8kit
from fp8kit._kernels import codec as kc
from fp8kit._kernels.codec import dummy, encode_kernel, plan
from fp8kit.formats import registered_formats

pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value encountered in cast"),
    pytest.mark.filterwarnings("ignore:overflow encountered in cast"),
]

FORMATS = [*registered_formats().values(), *USER_FORMATS]
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def _bits(fmt, dtype):
    """Every sign, exponent and top mantissa bits with low bits 0, 1, all ones, and
    just below, at and above half (every tie of a format with up to 7 (float32) or 4
    (float64) mantissa bits, and their neighbours), every NaN payload's ends, and the
    format's boundaries (values, midpoints and their neighbours)."""
    if dtype == F32:
        hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
        lows = [0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF]
        extra = [0x7F800001, 0x7FBFFFFF, 0x7FC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0xFF800001]
        u = np.uint32
    else:
        hi = np.arange(1 << 16, dtype=np.uint64) << np.uint64(48)
        lows = [0, 1, (1 << 47) - 1, 1 << 47, (1 << 47) + 1, (1 << 48) - 1]
        extra = [0x7FF0000000000001, 0x7FF8000000000000, 0x7FFFFFFFFFFFFFFF, (1 << 64) - 1]
        u = np.uint64
    grid = [hi | u(low) for low in lows]
    bounds = float64_boundaries(fmt).astype(dtype).view(f"u{dtype.itemsize}")
    return np.concatenate([*grid, np.array(extra, u), bounds])


def _codes(fmt, dtype, saturate, x, table_dtype=None):
    k, _ = encode_kernel(fmt, dtype, saturate, table_dtype=table_dtype)
    if table_dtype is None:
        out = np.empty(x.size, fmt.code_dtype)
        table = dummy(np.uint8)
    else:  # round-to-format through a table: the identity, so the codes themselves
        out = np.empty(x.size, table_dtype)
        table = np.arange(1 << fmt.bits, dtype=table_dtype)
    k.serial(x, dummy(np.uint32), table, out)
    return out, k._key[-1]


# (only the pairs with an encode_fast kernel: the others never take the lean rounding)
FAST_PAIRS = [
    pytest.param(fmt, dtype, id=f"{fmt}-{dtype}")
    for fmt in FORMATS
    for dtype in (F32, F64)
    if plan(fmt, dtype).strategy == "fast" and not plan(fmt, dtype).widen_first
]


@pytest.mark.parametrize(("fmt", "dtype"), FAST_PAIRS)
def test_lean_rounding_gives_the_same_codes(fmt, dtype, monkeypatch):
    x = _bits(fmt, dtype)
    sats = [False, True] + (["propagate"] if fmt.has_inf else [])
    cases = [(s, t) for s in sats for t in (None, np.dtype(np.uint32))]
    lean = {c: _codes(fmt, dtype, *c[:1], x, c[1]) for c in cases}
    encode_kernel.cache_clear()
    monkeypatch.setattr(kc, "USE_LEAN", False)
    try:
        for c in cases:
            got, used = lean[c]
            want, fast = _codes(fmt, dtype, *c[:1], x, c[1])
            assert not fast
            bad = np.flatnonzero(got != want)
            assert not bad.size, (c, used, [(hex(x[i]), got[i], want[i]) for i in bad[:5]])
    finally:
        encode_kernel.cache_clear()


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize(
    "name",
    ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "bfloat16",
     "float8_e4m3", "float6_e2m3fn", "float4_e2m1fn", "p3109_k8p3se", "p3109_k8p3sf"],
)  # fmt: skip
def test_common_formats_round_lean_in_one_kernel(name, saturate, dtype):
    """The lean rounding is what these calls get (the speed of issue 16), and one compiled
    function serves them all (no more kernels than before for the common calls)."""
    k, _ = encode_kernel(fp8kit.get_format(name), dtype, saturate)
    assert k._key[-1] is True
    if name.startswith("float8"):
        ref, _ = encode_kernel(fp8kit.get_format("float8_e4m3fn"), dtype, True)
        assert k._key == ref._key


@pytest.mark.parametrize(
    "name, dtype",
    [("float8_e4m3fn", F32), ("float8_e5m2fnuz", F32), ("bfloat16", F32), ("float8_e4m3fnuz", F64),
     ("p3109_k8p3ue", F32)],
    ids=str,
)  # fmt: skip
@pytest.mark.parametrize("nchunks", [1, 3])
def test_large_arrays_streamed_give_the_same_codes(name, dtype, nchunks):
    """From kc.STREAM_MIN_TRAFFIC bytes on, encode kernels write whole cache lines with
    non-temporal stores through a buffer (the ends of each chunk in place): the same codes
    as the in-place loop, for an output that starts off a line boundary and chunks that
    end anywhere."""
    fmt = fp8kit.get_format(name)
    k, _ = encode_kernel(fmt, dtype, False)
    code_dt = np.dtype(fmt.code_dtype)
    n = kc.STREAM_MIN_TRAFFIC // (dtype.itemsize + code_dt.itemsize) + 4099
    x = np.random.default_rng(16).integers(0, 1 << 64, n, np.uint64, endpoint=False)
    x = x.astype(f"u{dtype.itemsize}")
    lut, table = dummy(np.uint32), dummy(np.uint8)
    base = np.zeros(n + 64, code_dt)
    out = base[3 : 3 + n]  # (off a line boundary: a partial line first)
    k.build()(x, lut, table, out, nchunks)
    want = np.empty(n, code_dt)
    piece = n // 4 + 1  # (below the threshold: written in place)
    for i in range(0, n, piece):
        k.build()(x[i : i + piece], lut, table, want[i : i + piece], 1)
    bad = np.flatnonzero(out != want)
    assert not bad.size, [(i, hex(x[i]), out[i], want[i]) for i in bad[:5]]
    assert not base[:3].any() and not base[3 + n :].any()


def test_large_output_off_its_element_alignment():
    """A 16-bit output at an odd address (numpy allows one: ``aligned`` False) is written in
    place: no cache line boundary falls on an element there (non-temporal stores fault)."""
    n = kc.STREAM_MIN_TRAFFIC // 6 + 77
    x = np.random.default_rng(5).standard_normal(n, dtype=np.float32)
    raw = np.zeros(2 * n + 1, np.uint8)
    out = raw[1:].view(np.uint16)
    assert not out.flags.aligned
    fp8kit.encode(x, "bfloat16", out=out.view(fp8kit.get_format("bfloat16").dtype))
    np.testing.assert_array_equal(out, fp8kit.encode(x, "bfloat16").view(np.uint16))
