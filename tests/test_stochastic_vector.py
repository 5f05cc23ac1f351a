"""Stochastic rounding to formats of up to 16 bits runs fp8kit._kernels.stochastic's kernel
(each block's random words in one pass, then its runs of elements; values through the
decode table's byte planes); it must give the bits of encode_mode_kernel's own kernel
(``vector=False``, another loop structure over the same rules), whose words and results the
rounding tests check against gfloat and the rule itself, and the exact oracle's: for every
format it takes, input dtype, random-bit count and saturation, to codes and to values, any
chunking, and blocks that start inside an array (Dask blocks)."""

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit._args import rounding as rounding_arg
from fp8kit._kernels.codec import dummy, encode_mode_kernel
from fp8kit._kernels.decode import format_planes
from fp8kit._kernels.rounding import STOCHASTIC
from fp8kit._kernels.tables import decode_table
from fp8kit.formats import registered_formats

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
KEY = np.array([0x89ABCDEF, 0x01234567], np.uint32)
KEY.flags.writeable = False  # (as the kernels' signatures take them)
#: The formats of 8 bits or fewer the vector kernel takes, where the Numba kernel compared
#: with reads the same data (not P3109's 8-bit unsigned precision-1 formats, which it
#: rounds widened to float64: test_unsigned_precision_1_formats_round_stochastically_...
#: compares them with the exact oracle).
VECTOR = sorted(
    f.name
    for f in registered_formats().values()
    if f.bits <= 8
    and encode_mode_kernel(f, F32, True, STOCHASTIC, 8)[0]._key[0] == "sr"
    and not encode_mode_kernel(f, F32, True, STOCHASTIC, 8, vector=False)[1].widen_first
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
# float64: X's values widened, with float64 bits below float32's precision (zero, the
# lowest, half and all: what rounding to odd on float32 keeps as a sticky bit), and what
# float32 cannot hold (beyond its range, below its subnormals, float64 subnormals)
with np.errstate(invalid="ignore"):
    _WIDE = X[::8].view(np.float32).astype(np.float64).view(np.uint64)
_LOW = np.array([0, 1, 1 << 28, (1 << 29) - 1], np.uint64)
_EDGE = np.array(
    [0x47F0000000000000, 0x47EFFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF, 0x3690000000000000,
     0x36A0000000000001, 0x0000000000000001, 0x000FFFFFFFFFFFFF, 0x7FF0000000000001],
    np.uint64,
)  # fmt: skip
X64 = _rng.permutation(
    np.concatenate([(_WIDE[:, None] | _LOW).ravel(), _EDGE, _EDGE | np.uint64(1 << 63)])
)
X64.flags.writeable = False


def _run(kernel, x, values, fmt, dt, offset, nchunks):
    table = dummy(np.uint8)
    bits = {4: np.uint32, 2: np.uint16, 8: np.uint64}[dt.itemsize]
    if values:  # (the table's byte planes, or where the kernel reads entries, the table)
        table = format_planes(fmt, dt) if kernel.planes else decode_table(fmt, dt).view(bits)
    out = np.zeros(x.size, bits if values else np.uint8)
    kernel.build()(x, dummy(np.uint32), table, out, KEY, offset, nchunks)
    return out


def _inputs_for(dt, values):
    """(bits dtype, the kernels' table dtype or None, inputs, (offset, size, chunks) cases)
    of ``dt`` data."""
    bits_dt = {4: np.uint32, 2: np.uint16, 8: np.uint64}[dt.itemsize]
    xs = {F32: X, F64: X64}.get(dt, X16)
    cases = ((0, xs.size, 1), (12345, 100_001, 3), (7, 70, 1))
    return bits_dt, np.dtype(bits_dt) if values else None, xs, cases


def test_the_vector_kernel_serves_the_signed_and_unsigned_formats():
    assert {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "p3109_k8p3se"} <= set(VECTOR)
    assert "p3109_k8p3ue" in VECTOR and "float8_e8m0fnu" in VECTOR
    assert {"float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"} <= set(VECTOR)


#: The default run's share of VECTOR: the ml_dtypes/OCP formats and P3109's of every kind
#: (signed and unsigned, extended and finite, precision 1 to K - 1, K = 3 to 8); the rest
#: run with the slow tests (the whole matrix took 180 s of the default run's CPU time).
SAMPLED = {
    "p3109_k8p1se", "p3109_k8p3se", "p3109_k8p3ue", "p3109_k8p7uf", "p3109_k7p1uf",
    "p3109_k6p5sf", "p3109_k5p4se", "p3109_k4p2ue", "p3109_k3p1ue", "p3109_k3p3uf",
}  # fmt: skip
VECTOR_PARAMS = [
    name if not name.startswith("p3109") or name in SAMPLED
    else pytest.param(name, marks=pytest.mark.slow)
    for name in VECTOR
]  # fmt: skip


class _Choices(tuple):
    """The default run's random-bit counts of a matrix test: each cell takes one of them."""


def sampled(choices, every):
    """Random-bit counts of a matrix test: in the default run one of ``choices`` per cell
    (:func:`cell_counts`: every choice some cells), ``every`` in the slow one.  Each count
    builds a Numba kernel to compare with (~0.6 s, shared by the formats of a cell's dtype
    and output): the counts, not the data, are the matrix's time."""
    return pytest.mark.parametrize(
        "bit_counts",
        [_Choices(choices), pytest.param(every, marks=pytest.mark.slow)],
        ids=["sampled", "every"],
    )


def cell_counts(bit_counts, *cell):
    """The counts of the matrix cell ``cell`` (indices): in the default run the choice
    their sum picks, in the slow one all of them."""
    if isinstance(bit_counts, _Choices):
        return bit_counts[sum(cell) % len(bit_counts)]
    return bit_counts


#: Indices of the data types in a matrix cell (see cell_counts).
DT_INDEX = {F32: 0, BF16: 1, F16: 2, F64: 3}


#: The data types of the matrices below: float16 data in the slow run (its bits are staged
#: as float32 bits, then it shares bfloat16's compiled function; the Numba kernel compared
#: with is its own, ~0.4 s a random-bit count; test_vector_stochastic_rounding_equals_...
#: keeps it in the default run).
DTYPES_F16_SLOW = [F32, BF16, pytest.param(F16, marks=pytest.mark.slow), F64]


# (each word split: 4, 2, 1 parts; 20: e4m3's drop)
@sampled([(4,), (13,), (20,), (4, 20)], (4, 8, 13, 16, 20))
@pytest.mark.parametrize("values", [False, True], ids=["codes", "values"])
@pytest.mark.parametrize(
    "dt", [F32, BF16, F16, F64], ids=["float32", "bfloat16", "float16", "float64"]
)
@pytest.mark.parametrize("name", VECTOR_PARAMS)
def test_vector_stochastic_rounding_equals_the_numba_kernel(name, dt, values, bit_counts):
    fmt = fp8kit.get_format(name)
    # (no byte planes: no AVX512-VBMI, or float64 values wider than the planes' 16 bits:
    # the table's entries)
    planes = values and format_planes(fmt, dt) is not None
    bits_dt, table, xs, cases = _inputs_for(dt, values)
    for bits in cell_counts(bit_counts, 2 * DT_INDEX[dt], values):
        for saturate in (True, False):
            args = (fmt, dt, saturate, STOCHASTIC, bits, table)
            vec = encode_mode_kernel(*args, planes=planes)[0]
            ref = encode_mode_kernel(*args, planes=planes, vector=False)[0]
            assert vec._key[0] == "sr" and ref._key[0] == "mode"
            assert vec.planes == planes
            for offset, size, nchunks in cases if dt in (F32, F64) else cases[1:]:
                x = xs[:size]
                got = _run(vec, x, values, fmt, dt, offset, nchunks)
                want = _run(ref, x, values, fmt, dt, offset, nchunks)
                assert got.tolist() == want.tolist(), (bits, saturate, offset, size, nchunks)


def test_every_dtype_on_a_generic_cpu(tmp_path):
    """With ``NUMBA_CPU_NAME=generic`` (no AVX-512, no F16C, no VBMI) stochastic rounding
    of every dtype gives the codes it gives here."""
    import os
    import subprocess
    import sys

    rng = np.random.default_rng(23)
    data = {
        "f32": X[:70_001].view(np.float32),
        "bf16": X16[:50_003].view(BF16),
        "f16": X16[:50_003].view(F16),
        "f64": X64[:60_007].view(np.float64),
    }
    for name, x in data.items():
        np.save(tmp_path / f"{name}.npy", x.view(np.uint8))
    seed = int(rng.integers(1 << 30))
    code = (
        "import ml_dtypes, numpy as np, fp8kit\n"
        f"dts = {{'f32': np.float32, 'bf16': ml_dtypes.bfloat16, 'f16': np.float16,"
        f" 'f64': np.float64}}\n"
        "for name, dt in dts.items():\n"
        f"    x = np.load({str(tmp_path)!r} + f'/{{name}}.npy').view(dt)\n"
        "    for fmt in ('float8_e4m3fn', 'float8_e5m2fnuz'):\n"
        f"        c = fp8kit.encode(x, fmt, rounding='stochastic', seed={seed}, random_bits=13)\n"
        f"        np.save({str(tmp_path)!r} + f'/out_{{name}}_{{fmt}}.npy', c.view(np.uint8))\n"
    )
    env = dict(os.environ, NUMBA_CPU_NAME="generic", NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name, x in data.items():
        for fmt in ("float8_e4m3fn", "float8_e5m2fnuz"):
            want = fp8kit.encode(x, fmt, rounding="stochastic", seed=seed, random_bits=13)
            got = np.load(tmp_path / f"out_{name}_{fmt}.npy")
            np.testing.assert_array_equal(got, want.view(np.uint8), err_msg=f"{name} {fmt}")


VARIANTS = ["stochastic_c", "stochastic_b", "stochastic_odd", "stochastic_half"]


# (-1, -2: that many below the bits the format drops, where the variants stop being native)
@sampled([((4, -1),) * 4, ((13, -2),) * 4], ((4, 13, -2, -1),) * 4)
@pytest.mark.parametrize("values", [False, True], ids=["codes", "values"])
@pytest.mark.parametrize("dt", DTYPES_F16_SLOW, ids=["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn",
                                  "p3109_k8p3se", "float6_e3m2fn"])  # fmt: skip
def test_vector_stochastic_variants_equal_the_numba_kernel(name, dt, values, bit_counts):
    """The variants (first rounding the fraction to the random bits, ties by their rule),
    as many random bits as the format drops or fewer: the reference kernel's bits."""
    from fp8kit._kernels.rounding import MODES

    fmt = fp8kit.get_format(name)
    if values and format_planes(fmt, dt) is None:
        pytest.skip("no byte planes: round_to takes the Numba kernel")  # pragma: no cover
    bits_dt = {4: np.uint32, 2: np.uint16, 8: np.uint64}[dt.itemsize]
    table = np.dtype(bits_dt) if values else None
    xs = {F32: X, F64: X64}.get(dt, X16)
    sh = 23 - fmt.mantissa_bits
    for mode, counts in zip(VARIANTS, cell_counts(bit_counts, DT_INDEX[dt], values), strict=True):
        for bits in (c if c > 0 else sh + c for c in counts):
            args = (fmt, dt, True, MODES[mode], bits, table)
            vec = encode_mode_kernel(*args, planes=values)[0]
            ref = encode_mode_kernel(*args, planes=values, vector=False)[0]
            assert vec._key[0] == "sr", (mode, bits)
            got = _run(vec, xs, values, fmt, dt, 12345, 3)
            want = _run(ref, xs, values, fmt, dt, 12345, 3)
            assert got.tolist() == want.tolist(), (mode, bits)


def test_stochastic_variants_run_natively_through_the_api():
    """round_to and encode in a variant (16 random bits by default) take the stochastic
    kernel, and agree with each other."""
    from fp8kit._kernels.bits import _hardware_half
    from fp8kit._kernels.rounding import MODES

    for name in ("bfloat16", "float16"):  # (as many random bits as bits dropped, or more)
        fmt = fp8kit.get_format(name)
        for dt in (F32, BF16, F16):
            for mode in VARIANTS:
                assert encode_mode_kernel(fmt, dt, True, MODES[mode], 16)[0]._key[0] == "sr"
                if _hardware_half() or not (name == "bfloat16" and dt == F16):
                    table = np.dtype(f"u{dt.itemsize}")
                    kernel = encode_mode_kernel(fmt, dt, True, MODES[mode], 16, table)[0]
                    assert kernel._key[0] == "sr", (name, dt, mode)
    fmt = fp8kit.get_format("float8_e4m3fn")
    x = np.linspace(-3, 3, 5001, dtype=np.float32)
    for mode in VARIANTS:
        assert encode_mode_kernel(fmt, F32, True, MODES[mode], 16)[0]._key[0] == "sr"
        if format_planes(fmt, F32) is not None:
            table = np.dtype(np.uint32)
            kernel = encode_mode_kernel(fmt, F32, True, MODES[mode], 16, table, planes=True)[0]
            assert kernel._key[0] == "sr"
        a = fp8kit.round_to(x, fmt, rounding=mode, seed=3)
        b = fp8kit.encode(x, fmt, rounding=mode, seed=3)
        np.testing.assert_array_equal(fp8kit.decode(b, fmt), a)


def _subnormal_ties():
    """float32 values at and next to the ties of the variants' first rounding below
    float16's smallest normal with 13 and 14 random bits (odd multiples of 2**-38 and
    2**-39 under 2**-14, and their neighbours), then values whose lowest set bit is each
    bit of the mantissa at every exponent from below float16's subnormals to its smallest
    normal.  (A tie's rule moves the rounded fraction by one unit, so that it decides a
    result with probability 2**-random_bits: 2**16 ties each.)"""
    rng = np.random.default_rng(18)
    ties = []
    for b in (13, 14):
        k = rng.integers(0, 1 << min(23, b + 10), 1 << 16)
        ties.append(((2 * k + 1) * 2.0 ** -(25 + b)).astype(np.float32).view(np.uint32))
    ties = np.concatenate(ties)
    exps = np.arange(90, 115, dtype=np.uint32)
    pos = np.arange(23, dtype=np.uint32)
    e, p = (a.ravel() for a in np.meshgrid(exps, pos))
    e, p = np.repeat(e, 8), np.repeat(p, 8)
    above = rng.integers(0, 1 << 23, e.size, dtype=np.uint32) & ~((np.uint32(2) << p) - 1)
    bits = (e << 23) | (above & 0x7FFFFF) | (np.uint32(1) << p)
    bits = np.concatenate([ties, ties + 1, ties - 1, bits])
    return rng.permutation(np.concatenate([bits, bits | np.uint32(1 << 31)]))


def _float64_ties(fmt, bit_counts):
    """float64 bits at and next to the ties of the variants' first rounding (the fraction's
    bit right below the random bits set, none below it) for each count of random bits, in
    ``fmt``'s normal range and below its smallest normal (where float64 carries bits that
    float32 drops), tiny values whose only set bits lie far below float32's (their sticky
    bit), both signs."""
    rng = np.random.default_rng(19)
    m, n = fmt.mantissa_bits, 1 << 12
    vals = []
    for b in bit_counts:
        t = (2 * rng.integers(0, 1 << b, n) + 1).astype(np.float64)
        j = rng.integers(0, 1 << m, n).astype(np.float64)
        e = rng.integers(fmt.minexp, fmt.maxexp, n)
        vals.append(np.ldexp(1 + j * 2.0**-m + t * 2.0 ** -(m + b + 1), e))
        sub = j + t * 2.0 ** -(b + 1)  # (below the smallest normal: its spacing's units)
        vals.append(np.ldexp(sub, fmt.minexp - m))
    v = np.concatenate(vals)
    v = np.concatenate([v, np.nextafter(v, np.inf), np.nextafter(v, -np.inf)])
    tiny = np.ldexp(1.0, np.array([-100, -140, -149, -160, -300, -1000, -1074]))
    v = np.concatenate([v, tiny, tiny * 1.5, [np.ldexp(3.0, fmt.minexp - m - 40)]])
    # (around float32's largest and 2**128, beyond which a value always overflows)
    f32max = float(np.finfo(np.float32).max)
    huge = np.array([f32max, 2.0**128, 2.0**128 - 2.0**75, 1e39, 1e300, np.finfo(np.float64).max])
    v = np.concatenate([v, huge, np.nextafter(huge, 0), np.nextafter(huge[:-1], np.inf)])
    # (a value from 2**128 on, truncated on float32, is float32's largest, which rounds down
    # to bfloat16's largest where the random number is 0: 2**16 of them, each its own word)
    v = np.concatenate([v, np.repeat([2.0**128, 1e39], 1 << 16)])
    return rng.permutation(np.concatenate([v, -v])).view(np.uint64)


def _variants_many_bits(fmt, dt, values, bit_counts, saturate=True):
    """The vector kernel of every variant against the Numba kernel's bits for
    ``bit_counts`` random bits (those at least the bits the normal range drops)."""
    from fp8kit._kernels.rounding import MODES

    fmt = fp8kit.get_format(fmt)
    planes = values and fmt.bits <= 8
    if planes and format_planes(fmt, dt) is None:
        pytest.skip("no byte planes: round_to takes the Numba kernel")  # pragma: no cover
    bits_dt, table, xs, _ = _inputs_for(dt, values)
    if dt == F32:
        xs = np.concatenate([xs[::4], _subnormal_ties()])
    if dt == F64:
        xs = np.concatenate([xs[::2], _float64_ties(fmt, bit_counts)])
    out_dt = bits_dt if values else (np.uint8 if fmt.bits <= 8 else np.uint16)
    taken = 0
    for bits in bit_counts:
        for mode in VARIANTS:
            args = (fmt, dt, saturate, MODES[mode], bits, table)
            vec = encode_mode_kernel(*args, planes=planes)[0]
            ref = encode_mode_kernel(*args, planes=planes, vector=False)[0]
            assert vec._key[0] == "sr", (mode, bits)
            taken += 1
            got, want = np.zeros(xs.size, out_dt), np.zeros(xs.size, out_dt)
            for kernel, out in ((vec, got), (ref, want)):
                tab = dummy(np.uint8)
                if values:
                    tab = format_planes(fmt, dt) if kernel.planes else decode_table(fmt, dt)
                    tab = tab if kernel.planes else tab.view(bits_dt)
                kernel.build()(xs, dummy(np.uint32), tab, out, KEY, 12345, 3)
            assert got.tolist() == want.tolist(), (mode, bits)
    return taken


@pytest.mark.parametrize(
    ("fmt", "dt", "values"),
    [("float16", F32, False), ("float16", F32, True), ("float16", BF16, False),
     ("bfloat16", F32, False), ("bfloat16", F16, True), ("float16", F64, False),
     ("float16", F64, True)],
    ids=str,
)  # fmt: skip
def test_vector_stochastic_variants_with_as_many_random_bits_as_dropped_or_more(fmt, dt, values):
    """The variants where the random bits reach the bits the normal range drops (bfloat16
    and float16 in the default 16): the fraction is exact there, and below the smallest
    normal the fixed point has a bit more than the random bits (its sticky bit from the
    source bits): the Numba kernel's bits, ties of the subnormal range too.  float64 data
    (float16): the fraction continues into the 32 bits below those float32 keeps, ties in
    both ranges built from float64 values (the Numba kernel rounds float64 itself)."""
    sh = 23 - fp8kit.get_format(fmt).mantissa_bits
    assert _variants_many_bits(fmt, dt, values, (sh, sh + 1, 19)) == 12


@pytest.mark.parametrize(
    "fmt",
    ["float16", "bfloat16", "p3109_k8p7se", "p3109_k8p7uf", "p3109_k7p7ue", "float8_e4m3fn"],
)
def test_float64_variants_from_one_random_bit_below_float32s_drop(fmt):
    """float64 data in the variants from one random bit fewer than float32 drops on (16,
    the default, for P3109's precision-7 formats), where the first rounding's round bit is
    the first of float64's 32 bits below float32's: the Numba kernel's codes, ties in both
    ranges, values beyond float32's range (bfloat16: those from 2**128 on overflow whatever
    the random number, staged as a marker); their values: the Numba kernel where no byte
    planes hold such float64 values."""
    sh = 23 - fp8kit.get_format(fmt).mantissa_bits
    assert _variants_many_bits(fmt, F64, False, (sh - 1, sh)) == 8
    if fmt == "bfloat16":  # (beyond its largest: Inf, not the largest rounded down)
        assert _variants_many_bits(fmt, F64, False, (sh,), saturate=False) == 4


def test_float64_variants_to_bfloat16_rounded_to_odd_overflow_from_2_128():
    """float64 data to bfloat16 in the variants with up to two random bits fewer than
    float32 drops (rounded to odd on float32, whose largest finite every value from 2**128
    on becomes): native, and those values overflow whatever the random number (Inf without
    saturation, never bfloat16's largest rounded down); the Numba kernel's codes, ties in
    both ranges."""
    assert _variants_many_bits("bfloat16", F64, False, (4, 14)) == 8
    assert _variants_many_bits("bfloat16", F64, False, (9, 14), saturate=False) == 8


@pytest.mark.slow
@pytest.mark.parametrize("values", [False, True], ids=["codes", "values"])
@pytest.mark.parametrize("dt", [F32, BF16, F16], ids=["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("fmt", ["bfloat16", "float16", "float8_e5m2"], ids=str)
def test_vector_stochastic_variants_with_many_random_bits_every_case(fmt, dt, values):
    sh = 23 - fp8kit.get_format(fmt).mantissa_bits
    assert _variants_many_bits(fmt, dt, values, (sh, sh + 1, 16, 20, 24, 29, 32)) >= 8


#: Formats of 9-16 bits: bfloat16 and float16 (codes and values), a user format (codes).
E6M9 = fp8kit.FloatFormat(name="u_e6m9", exponent_bits=6, mantissa_bits=9, bias=31, specials="ieee")
WIDE = ["bfloat16", "float16", E6M9]


# (4, 20: a word split in 4 parts and in 1; 13 and 16: what float16 and bfloat16 drop)
@sampled([(4, 16), (13, 20)], (4, 8, 12, 13, 16, 20, 32))
@pytest.mark.parametrize("values", [False, True], ids=["codes", "values"])
@pytest.mark.parametrize("dt", DTYPES_F16_SLOW, ids=["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize(
    "fmt", ["bfloat16", "float16", pytest.param(E6M9, marks=pytest.mark.slow)], ids=str
)  # (the user's format: float32 data in the default run, below)
def test_vector_stochastic_rounding_to_16_bit_formats(fmt, dt, values, bit_counts):
    """Formats of 9-16 bits take the vector kernel too (16-bit codes; bfloat16's and
    float16's values from float32 and float64 data, widened from the codes in the kernel,
    and from 16-bit data, the codes or rounded to the other 16-bit dtype):
    the Numba kernel's bits wherever the constant-shift formula holds (any random bits
    for float32, bfloat16 and float16 data, fewer than float32 drops for float64 data);
    elsewhere (a user's 16-bit format's values of 16-bit data) the Numba kernel."""
    fmt = fp8kit.get_format(fmt) if isinstance(fmt, str) else fmt
    bits_dt, table, xs, cases = _inputs_for(dt, values)
    taken = 0
    bit_counts = cell_counts(bit_counts, fmt.name == "float16", DT_INDEX[dt], values)
    for bits in bit_counts:
        for saturate in (True, False):
            args = (fmt, dt, saturate, STOCHASTIC, bits, table)
            vec = encode_mode_kernel(*args, planes=False)[0]
            ref = encode_mode_kernel(*args, planes=False, vector=False)[0]
            assert vec._key[0] == "sr" and not vec.planes and ref._key[0] == "mode"
            taken += 1
            for offset, size, nchunks in cases if dt in (F32, F64) else cases[1:]:
                x = xs[:size]
                out_dt = bits_dt if values else np.uint16
                got, want = np.zeros(size, out_dt), np.zeros(size, out_dt)
                tab = decode_table(fmt, dt).view(bits_dt) if values else dummy(np.uint8)
                for kernel, out in ((vec, got), (ref, want)):
                    kernel.build()(x, dummy(np.uint32), tab, out, KEY, offset, nchunks)
                assert got.tolist() == want.tolist(), (bits, saturate, offset, size, nchunks)
    assert taken == 2 * len(bit_counts)


def test_stochastic_rounding_to_bfloat16_runs_natively_through_the_api():
    """fp8kit.round_to and encode of float32 data to bfloat16 in the default stochastic
    rounding (16 random bits: all the bits float32 drops) take the stochastic kernel and
    give the reference kernel's bits."""
    x = np.random.default_rng(3).standard_normal(100_003).astype(np.float32)
    got = fp8kit.round_to(x, "bfloat16", rounding="stochastic", seed=7)
    codes = fp8kit.encode(x, "bfloat16", rounding="stochastic", seed=7)
    np.testing.assert_array_equal(got.view(np.uint32) >> 16, codes)
    fmt = fp8kit.get_format("bfloat16")
    kernel = encode_mode_kernel(fmt, F32, True, STOCHASTIC, 16, np.dtype(np.uint32))[0]
    assert kernel._key[0] == "sr"
    ref = encode_mode_kernel(fmt, F32, True, STOCHASTIC, 16, vector=False)[0]
    want = np.zeros(x.size, np.uint16)
    _, key, _ = rounding_arg("stochastic", 7, 16, "encode")
    ref.build()(x.view(np.uint32), dummy(np.uint32), dummy(np.uint8), want, key, 0, 1)
    np.testing.assert_array_equal(codes, want)


def _flush_case(fmt, dt, values, mode, bits):
    """The vector kernel with ``flush_subnormals`` against the Numba kernel's bits (its
    flush_code), codes or values, a block starting inside the array."""
    fmt = fp8kit.get_format(fmt) if isinstance(fmt, str) else fmt
    planes = values and fmt.bits <= 8
    if planes and format_planes(fmt, dt) is None:
        pytest.skip("no byte planes: round_to takes the Numba kernel")  # pragma: no cover
    bits_dt, table, xs, _ = _inputs_for(dt, values)
    args = (fmt, dt, True, mode, bits, table)
    vec = encode_mode_kernel(*args, planes=planes, flush=True)[0]
    ref = encode_mode_kernel(*args, planes=planes, flush=True, vector=False)[0]
    assert vec._key[0] == "sr" and ref._key[0] == "mode"
    out_dt = bits_dt if values else (np.uint8 if fmt.bits <= 8 else np.uint16)
    got, want = np.zeros(xs.size, out_dt), np.zeros(xs.size, out_dt)
    for kernel, out in ((vec, got), (ref, want)):
        tab = dummy(np.uint8)
        if values:
            tab = format_planes(fmt, dt) if kernel.planes else decode_table(fmt, dt).view(bits_dt)
        kernel.build()(xs, dummy(np.uint32), tab, out, KEY, 12345, 3)
    assert got.tolist() == want.tolist()
    return got


def _oracle_codes(x, fmt, seed, bits, rounding="stochastic", **kw):
    """fp8kit.encode's codes of ``x`` in a stochastic mode, asserted equal to the exact
    oracle's with the same random words (``kw``: saturate, flush_subnormals)."""
    from fp8kit._kernels.rounding import random_words
    from fp8kit._reference import encode_value

    got = fp8kit.encode(x, fmt, rounding=rounding, seed=seed, random_bits=bits, **kw)
    rnd = random_words(x.size, seed, bits)
    opts = dict(rounding=rounding, random_bits=bits, **kw)
    want = [encode_value(float(v), fmt, rnd=int(r), **opts) for v, r in zip(x, rnd, strict=True)]
    assert np.asarray(got).tolist() == want, (fmt.name, bits, kw)
    return got


#: Formats with subnormals of every kind of sign: -0 (e4m3fn, e2m1fn, k8p3se), no -0
#: (e5m2fnuz), the unsigned P3109 ones (a negative value's code or-ed with another, not
#: a sign bit: kept whole), 16-bit codes; and precision 1 (no subnormals: nothing flushed).
FLUSHED = ["float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn", "p3109_k8p3se", "p3109_k8p3ue",
           "p3109_k8p1se", "bfloat16", "float16"]  # fmt: skip


@pytest.mark.parametrize(
    ("dt", "values"),
    [pytest.param(d, v, marks=pytest.mark.slow if v and d in (BF16, F16) else ())
     for d in (F32, BF16, F16, F64) for v in (False, True)],
    ids=[f"{d}-{v}" for d in ("float32", "bfloat16", "float16", "float64")
         for v in ("codes", "values")],
)  # (16-bit data's values in the slow run)  # fmt: skip
@pytest.mark.parametrize("name", FLUSHED)
@pytest.mark.parametrize("every", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["sampled", "every"])  # fmt: skip
def test_vector_stochastic_rounding_with_flush_subnormals(name, dt, values, every):
    """flush_subnormals in the stochastic kernel (compiled in): the reference kernel's
    bits, in stochastic rounding and a variant (the default run: one of them a cell, each
    compiling a Numba kernel), where a subnormal result (and only it) became a zero of its
    sign."""
    from fp8kit._kernels.rounding import MODES

    fmt = fp8kit.get_format(name)
    from fp8kit._kernels.bits import _hardware_half

    if values and name == "bfloat16" and dt == F16 and not _hardware_half():
        return  # pragma: no cover - (float32 -> float16 in software: the Numba kernel)
    plain = every or (DT_INDEX[dt] + values) % 2 == 0  # (float32 codes: below)
    if plain:
        got = _flush_case(fmt, dt, values, STOCHASTIC, 8)
    if every or not plain:
        _flush_case(fmt, dt, values, MODES["stochastic_c"], 4)
    if not values and fmt.mantissa_bits and dt == F32:
        # some results were subnormal unflushed: the flush was exercised
        plain = encode_mode_kernel(fmt, dt, True, STOCHASTIC, 8, None)[0]
        out = np.zeros(X.size, got.dtype)
        plain.build()(X, dummy(np.uint32), dummy(np.uint8), out, KEY, 12345, 3)
        smallest = 1 << fmt.mantissa_bits
        # (the magnitude: the code without its sign bit; the unsigned P3109 formats' whole)
        whole = name == "p3109_k8p3ue"
        sign = 0 if whole else 1 << (fmt.bits - 1)
        mag = out.astype(np.int64) & ~sign
        sub = (mag != 0) & (mag < smallest)
        assert sub.sum() > 100
        assert (got[sub].astype(np.int64) & ~sign == 0).all()
        # (the zero of the result's sign where the format has -0, else +0)
        neg_zero = sign and fp8kit.decode(np.array([sign], got.dtype), fmt)[0] == 0
        kept = out[sub].astype(np.int64) & sign if neg_zero else 0
        assert (got[sub].astype(np.int64) & sign == kept).all()
        assert (got[~sub] == out[~sub]).all()


@pytest.mark.slow
@pytest.mark.parametrize("dt", [F32, BF16, F64], ids=["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("name", VECTOR)
def test_vector_stochastic_flush_every_format(name, dt):
    # (float8_e8m0fnu from float64 data too since the eighteenth pass: rounded to odd on
    # float32 up to 21 random bits; it has no subnormals to flush)
    _flush_case(name, dt, False, STOCHASTIC, 8)
    if format_planes(fp8kit.get_format(name), dt) is not None:  # (else round_to: Numba)
        _flush_case(name, dt, True, STOCHASTIC, 8)


def test_precision_1_formats_round_stochastically_from_float32_bits():
    """P3109's precision-1 formats, which nearest-even widens to float64 (a tie goes to the
    even code, whose parity is not float32's exponent bit), round stochastically (no ties)
    from float32 bits in the vector kernel: the exact oracle's codes, every dtype, with and
    without flush_subnormals, through encode and round_to; no Numba compile (0.69 s)."""
    for name in ("p3109_k8p1se", "p3109_k8p1sf", "p3109_k4p1se"):
        fmt = fp8kit.get_format(name)
        for dt in (F32, BF16, F16, F64):
            kernel, pl = encode_mode_kernel(fmt, dt, True, STOCHASTIC, 16)
            assert kernel._key[0] == "sr" and not pl.widen_first, (name, dt)
        codes = np.arange(256 if fmt.bits == 8 else 16, dtype=np.uint8)
        vals = fp8kit.decode(codes, fmt, dtype=np.float64)
        vals = np.unique(vals[np.isfinite(vals)])
        x = np.concatenate([vals, (vals[1:] + vals[:-1]) / 2, vals[1:] * 0.7 + vals[:-1] * 0.3,
                            [1e-30, 1e30, np.inf, np.nan]])  # fmt: skip
        x = np.concatenate([x, -x]).astype(np.float32)
        for flush in (False, True):
            got = _oracle_codes(x, fmt, 5, 9, flush_subnormals=flush)
            again = fp8kit.round_to(x, fmt, rounding="stochastic", seed=5, random_bits=9,
                                    flush_subnormals=flush)  # fmt: skip
            np.testing.assert_array_equal(again, fp8kit.decode(got, fmt))


def _decisive(bits, n, seed, spans):
    """``n`` values at which each element's random number decides its rounding (element
    ``i`` draws ``R_i``, the top ``bits`` of its word): ``b + s * f`` where ``f`` carries
    exactly with ``R_i``, a tie of the variants' first rounding right below it, both nudged
    by ``2**-(bits + 20)`` (within float64's precision); ``(b, s)`` from ``spans`` by
    element."""
    from fp8kit._kernels.rounding import random_words

    r = (random_words(n, seed, bits) >> np.uint32(32 - bits)).astype(np.float64)
    i = np.arange(n)
    nudge = 2.0**-20
    delta = np.array([0, -0.5, -0.5 + nudge, -0.5 - nudge, -nudge])[i % 5]
    b, s = (np.array(v)[i // 5 % len(spans)] for v in zip(*spans, strict=True))
    return b + s * ((2.0**bits - r + delta) * 2.0**-bits)


@pytest.mark.parametrize("dt", [F32, BF16, F64], ids=["float32", "bfloat16", "float64"])
def test_unsigned_precision_1_formats_round_stochastically_in_the_vector_kernel(dt):
    """P3109's 8-bit unsigned precision-1 formats, whose smallest normal 2**-127 is a
    float32 subnormal (the plan widens them to float64), round in the stochastic kernel in
    every stochastic mode: the exact oracle's codes at values where each element's random
    number decides, from 0 to the overflow, both saturations, up to the random bits
    float32 keeps exact and beyond."""
    from fp8kit._kernels.rounding import MODES

    spans = [(0.0, 2.0**-127), (2.0**-127, 2.0**-127), (2.0**-126, 2.0**-126), (1.0, 1.0),
             (2.0**-100, 2.0**-100), (2.0**124, 2.0**124), (2.0**125, 2.0**125)]  # fmt: skip
    edges = [0.0, np.inf, np.nan, 2.0**127, 3e38, 1e-46, 2.0**-150, 2.0**-149, 1.5 * 2.0**-149]
    cases = [("p3109_k8p1ue", "stochastic"), ("p3109_k8p1uf", "stochastic_c"),
             ("p3109_k8p1ue", "stochastic_b"), ("p3109_k8p1uf", "stochastic_odd"),
             ("p3109_k8p1ue", "stochastic_half")]  # fmt: skip
    for j, (name, mode) in enumerate(cases):
        fmt = fp8kit.get_format(name)
        sr = mode == "stochastic"
        most = (22 if sr else 20) if dt == F64 else (23 if sr else 22)
        for bits in (most, most + 1):  # (on the float64 data the plan widens to)
            kernel, pl = encode_mode_kernel(fmt, dt, True, MODES[mode], bits)
            assert kernel._key[0] == "sr" and pl.source == "float64", (name, mode, bits)
        # (bfloat16 holds a fraction of 7 bits)
        for bits in (7,) if dt == BF16 else (9, most):
            x = _decisive(bits, 2000, j, spans)
            x = np.concatenate([x, -x[:40], edges, -np.array(edges)])
            with np.errstate(over="ignore"):
                x = x.astype(dt)
            for sat in (True, False):
                _oracle_codes(x, fmt, j, bits, rounding=mode, saturate=sat)
            # (no subnormals: flush_subnormals changes nothing)
            _oracle_codes(x, fmt, j, bits, rounding=mode, flush_subnormals=True)
    # (float64 data, stochastic: 23 random bits read the bit below float32's at 2**-127)
    if dt == F64:
        x = _decisive(23, 2000, 9, spans[:2])
        _oracle_codes(x, fp8kit.get_format("p3109_k8p1ue"), 9, 23)


@pytest.mark.parametrize("dt", [F32, BF16, F16, F64], ids=["float32", "bfloat16", "float16",
                                                         "float64"])  # fmt: skip
def test_float8_e8m0fnu_stochastic_in_the_vector_kernel_matches_the_exact_oracle(dt):
    """float8_e8m0fnu's powers of two round stochastically in the vector kernel (up with
    probability (x - 2**k) / 2**k; below 2**-126, a float32 subnormal, between codes 0 and
    1): the exact oracle's codes, every saturation and random-bit count up to 23 (more:
    the reference kernel).  float64 data with what float32 cannot hold: bits below its
    precision (the 23rd bit of 2**-127's position too), values beyond its range (which
    always overflow) and below its subnormals (not zeros: not NaN)."""
    fmt = fp8kit.get_format("float8_e8m0fnu")
    for bits in (1, 9, 16, 21, 22, 23, 24):
        kernel = encode_mode_kernel(fmt, dt, True, STOCHASTIC, bits)[0]
        assert (kernel._key[0] == "sr") == (bits <= 23), bits
    powers = np.exp2(np.arange(-127.0, 128.0))
    specials = [0.0, -1.0, np.inf, -np.inf, np.nan]
    x = np.concatenate([powers, powers * 1.25, powers * 1.5, powers * 1.75, powers * 0.75,
                        np.geomspace(1e-45, 3e38, 600), specials])  # fmt: skip
    with np.errstate(all="ignore"):
        x = x.astype(np.float32).astype(dt)
    if dt == F64:
        wide = [2.0**128, 1e39, 1e300, 3.4028235677973366e38, 3.4e38, 1e-46, 1e-300, 5e-324]
        # (2**-127's position: odd multiples of 2**-150, of which float32 keeps the bits
        # down to 2**-149; and nudged by float64's lower bits)
        k = np.arange(0, 1 << 22, 997, dtype=np.float64)
        pos = np.ldexp(2.0 * k + 1, -150) + 2.0**-127
        x = np.concatenate([x, powers * (1 + 2.0**-30), powers * (2 - 2.0**-40), wide * 20,
                            2.0**-127 * (1 + 2.0**-25) + powers[:40] * 0, pos,
                            pos * (1 + 2.0**-40), pos * (1 - 2.0**-40)])  # fmt: skip
    for sat in (True, False):
        for bits in (1, 16, 21, 22, 23) if dt == F64 else (1, 16, 23):
            got = _oracle_codes(x, fmt, 11, bits, saturate=sat)
            values = fp8kit.round_to(x, fmt, rounding="stochastic", seed=11, random_bits=bits,
                                     saturate=sat)  # fmt: skip
            ub = f"u{dt.itemsize}"
            np.testing.assert_array_equal(
                values.view(ub), fp8kit.decode(got, fmt, dtype=dt).view(ub)
            )
    if dt == F64:
        # (each element where its random number decides: the position at which it carries
        # exactly, and a hair below it, at 2**-127 and in the normal range; a bit below
        # float32's read wrongly flips a result with probability 2**-bits elsewhere)
        from fp8kit._kernels.rounding import random_words

        for bits in (22, 23):
            r = (random_words(1 << 12, 11, bits) >> (32 - bits)).astype(np.float64)
            at = 1 + (2.0**bits - r) * 2.0**-bits
            e = np.where(np.arange(r.size) % 2, -127, np.arange(r.size) % 250 - 124)
            x = np.ldexp(at, e) * np.where(np.arange(r.size) % 4 < 2, 1, 1 - 2.0**-45)
            _oracle_codes(x, fmt, 11, bits)


def test_float64_beyond_float32s_range_overflows_in_stochastic_rounding_to_bfloat16():
    """A float64 of 2**128 or more always overflows bfloat16 (Inf when not saturating;
    saturate="propagate" keeps Inf for Inf alone): the vector kernel, which truncates
    float64 on float32 (there float32's largest, below bfloat16's overflow by less than a
    step), marks them (a regression: 1e39 gave bfloat16's largest for 6% of random numbers
    with 4 bits); NaNs and Infs stay what they are, and float32's largest and values just
    below 2**128 round stochastically.  (The variants: test_float64_variants_to_bfloat16_...)"""
    from fp8kit._kernels.rounding import MODES

    fmt = fp8kit.get_format("bfloat16")
    for bits in (4, 16):
        assert encode_mode_kernel(fmt, F64, True, STOCHASTIC, bits)[0]._key[0] == "sr"
    assert encode_mode_kernel(fmt, F64, True, MODES["stochastic_c"], 8)[0]._key[0] == "sr"
    big = np.array([2.0**128, 1e39, 1.7e308, 3.4028235677973366e38, 3.4e38, 3.3e38,
                    np.nextafter(2.0**128, 0), np.inf, np.nan, 1e-300, 1e-45])  # fmt: skip
    x = np.concatenate([big, -big] * 200)
    x[::7] = -np.nan
    beyond = np.isfinite(x) & (np.abs(x) >= 2.0**128)
    for sat in (False, True, "propagate"):
        for bits in (4, 8, 15, 16):
            got = _oracle_codes(x, fmt, 5, bits, saturate=sat)
            values = fp8kit.round_to(x, fmt, rounding="stochastic", seed=5, random_bits=bits,
                                     saturate=sat)  # fmt: skip
            np.testing.assert_array_equal(values, fp8kit.decode(got, fmt, dtype=F64))
        assert (got[beyond] & 0x7FFF == (0x7F80 if sat is False else 0x7F7F)).all()


def _float64_beyond_float32():
    """float64 values with bits below float32's precision: X64, values at float16's
    subnormal ties widened and moved by up to 2**-20 of themselves, random normals over
    2**-30 .. 2**20, as bits."""
    rng = np.random.default_rng(19)
    ties = _subnormal_ties().view(np.float32).astype(np.float64)
    ties = ties * (1 + rng.uniform(0, 2.0**-20, ties.size))
    normals = rng.standard_normal(50_000) * np.exp2(rng.integers(-30, 20, 50_000))
    return np.concatenate([X64, ties.view(np.uint64), normals.view(np.uint64)])


def _float64_many_bits(fmt, bit_counts, values=False):
    fmt = fp8kit.get_format(fmt) if isinstance(fmt, str) else fmt
    xs = _float64_beyond_float32()
    table = np.dtype(np.uint64) if values else None
    planes = values and fmt.bits <= 8
    out_dt = np.uint64 if values else (np.uint16 if fmt.bits > 8 else np.uint8)
    for bits in bit_counts:
        for sat in (True, False):
            args = (fmt, F64, sat, STOCHASTIC, bits, table)
            vec = encode_mode_kernel(*args, planes=planes)[0]
            ref = encode_mode_kernel(*args, planes=planes, vector=False)[0]
            assert vec._key[0] == "sr", (bits, sat)
            got, want = np.zeros(xs.size, out_dt), np.zeros(xs.size, out_dt)
            for kernel, out in ((vec, got), (ref, want)):
                tab = dummy(np.uint8)
                if values:
                    tab = format_planes(fmt, F64) if kernel.planes else decode_table(fmt, F64)
                    tab = tab if kernel.planes else tab.view(np.uint64)
                kernel.build()(xs, dummy(np.uint32), tab, out, KEY, 777, 3)
            assert got.tolist() == want.tolist(), (bits, sat)


@pytest.mark.parametrize(("fmt", "bits"), [("float16", 16), ("bfloat16", 20),
                                           ("float8_e4m3fn", 24), (E6M9, 21)], ids=str)  # fmt: skip
def test_float64_stochastic_rounding_with_more_random_bits_than_float32_keeps(fmt, bits):
    """float64 data with more random bits than float32 drops below the format's precision
    (float16 in the default 16): the fraction's bits beyond float32's come from the 32 bits
    below those truncated on float32 (staged beside them), in the normal range and below
    the smallest normal: the Numba kernel's bits (which rounds float64 itself), values
    with bits below float32's precision at float16's subnormal ties too."""
    _float64_many_bits(fmt, (bits,))


@pytest.mark.slow
@pytest.mark.parametrize("values", [False, True], ids=["codes", "values"])
@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
                                 "float6_e3m2fn", E6M9], ids=str)  # fmt: skip
def test_float64_stochastic_rounding_with_many_random_bits_every_case(fmt, values):
    if values and isinstance(fmt, fp8kit.FloatFormat):
        pytest.skip("a user's 16-bit format's values: the Numba kernel with the table")
    f = fp8kit.get_format(fmt) if isinstance(fmt, str) else fmt
    sh = 23 - f.mantissa_bits
    counts = [b for b in (sh + 1, 16, 20, 24, 26, 29, 32) if b > sh]
    if f.name != "bfloat16":
        counts = [b for b in counts if f.mantissa_bits + b <= 30]
    _float64_many_bits(fmt, counts, values)


def _swap_mxcsr():
    """A function setting this thread's MXCSR and returning the old one (x86-64)."""
    import ctypes

    import llvmlite.binding as llvm
    from llvmlite import ir

    mod = ir.Module(name="mxcsr")
    i32, i8p = ir.IntType(32), ir.IntType(8).as_pointer()
    load = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i8p]), "llvm.x86.sse.ldmxcsr")
    store = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i8p]), "llvm.x86.sse.stmxcsr")
    fn = ir.Function(mod, ir.FunctionType(i32, [i32]), "swap_mxcsr")
    b = ir.IRBuilder(fn.append_basic_block())
    slot = b.alloca(i32)
    b.call(store, [b.bitcast(slot, i8p)])
    old = b.load(slot)
    b.store(fn.args[0], slot)
    b.call(load, [b.bitcast(slot, i8p)])
    b.ret(old)
    parsed = llvm.parse_assembly(str(mod))
    machine = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    swap = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_uint32)(
        engine.get_function_address("swap_mxcsr")
    )
    swap.engine = engine  # (keeps the code alive)
    return swap


@pytest.mark.parametrize("fmt", ["bfloat16", "float8_e8m0fnu"])
def test_float64_stochastic_rounding_ignores_flush_to_zero(fmt):
    """float64 data in float32's subnormal range, stochastically to the formats that reach
    it (bfloat16's subnormals, float8_e8m0fnu's 2**-127): the same codes with this
    thread's flush-to-zero and denormals-are-zero bits set (as another library may leave
    them), the float32 subnormals taken by integer operations, not the conversion."""
    kernel = encode_mode_kernel(fp8kit.get_format(fmt), F64, True, STOCHASTIC, 16)[0]
    assert kernel._key[0] == "sr"
    tiny = np.geomspace(2.0**-151, 2.0**-125, 1500)
    x = np.concatenate([tiny, -tiny, tiny * (1 + 2.0**-40), [2.0**-127, 2.0**-149, 1e-300]])
    kw = dict(rounding="stochastic", seed=13)
    want = fp8kit.encode(x, fmt, **kw)
    # (subnormal codes, not zeros alone; float8_e8m0fnu: 2**-127, -126 and -125, NaN)
    assert len({int(c) for c in want}) > (20 if fmt == "bfloat16" else 3)
    swap = _swap_mxcsr()
    old = swap(0x1F80 | 0x8040)  # (exceptions masked, flush-to-zero, denormals-are-zero)
    try:
        got = fp8kit.encode(x, fmt, **kw)
        flushed = np.float32(1e-40) * np.float32(1.0)  # (the mode is on)
    finally:
        swap(old)
    assert flushed == 0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", [F32, BF16, F16, F64], ids=["float32", "bfloat16", "float16",
                                                         "float64"])  # fmt: skip
def test_stochastic_round_to_writes_its_output_and_nothing_beyond(dt):
    """round_to into ``out``, a view ending inside a larger buffer, length no multiple of a
    vector (the kernels' staged, extra-word and value paths for each dtype): every element
    written as without ``out``, the rest of the buffer untouched."""
    x = (np.random.default_rng(20).standard_normal(1000) * 4).astype(dt)
    for fmt in ("bfloat16", "float16", "float8_e4m3fn", "float8_e8m0fnu"):
        variant = () if fmt == "float8_e8m0fnu" else (dict(rounding="stochastic_c", seed=2),)
        for kw in (dict(rounding="stochastic", seed=1), *variant):
            buf = np.full(x.size + 130, 7, dt)
            out = buf[:1000]
            fp8kit.round_to(x, fmt, out=out, **kw)
            u = f"u{dt.itemsize}"
            assert (buf[1000:].view(u) == np.full(130, 7, dt).view(u)).all(), (fmt, kw)
            np.testing.assert_array_equal(out.view(u), fp8kit.round_to(x, fmt, **kw).view(u))


@pytest.mark.parametrize("values", [False, True], ids=["codes", "values"])
def test_vector_stochastic_rounding_to_a_users_16_bit_format(values):
    """A user's 16-bit format from float32 data in the default run (every dtype: slow)."""
    test_vector_stochastic_rounding_to_16_bit_formats(E6M9, F32, values, (4, 13, 16, 20))


@pytest.mark.parametrize("dt", [F32, BF16, F16, F64], ids=["float32", "bfloat16", "float16",
                                                         "float64"])  # fmt: skip
def test_every_registered_format_rounds_stochastically(dt):
    """encode and round_to of every registered format in the stochastic modes (a format
    one mode and two dtypes, by turns) with the default 16 random bits: the same random
    words, so round_to's values are encode's codes decoded."""
    modes = ["stochastic", *VARIANTS]
    x = np.array([1.5, -2.25, 3e-39, 1e-45, 1e30, np.inf, np.nan, 0.0, 65504.0, 0.1] * 7)
    with np.errstate(over="ignore"):
        x = x.astype(dt)
    for i, fmt in enumerate(registered_formats().values()):
        if i % 2 != DT_INDEX[dt] % 2:  # (every format in two dtypes: ~1 s of compile each)
            continue
        mode = modes[(i + DT_INDEX[dt]) % len(modes)]
        mode = "stochastic" if fmt.specials == "unsigned" else mode  # (its only one)
        codes = fp8kit.encode(x, fmt, rounding=mode, seed=i)
        got = fp8kit.round_to(x, fmt, rounding=mode, seed=i)
        want = fp8kit.decode(codes, fmt, dtype=dt)
        u = f"u{dt.itemsize}"
        nan = np.isnan(want.astype(np.float64))
        assert (np.isnan(got.astype(np.float64)) == nan).all(), fmt.name
        np.testing.assert_array_equal(got.view(u)[~nan], want.view(u)[~nan], err_msg=fmt.name)
