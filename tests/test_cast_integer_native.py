"""float -> integer casts with x86's bits (what onnx.reference and ONNX Runtime give) for the
targets (the int8 ... uint64 types, int4/uint4, and ONNX Runtime's patterns) run a Numba kernel
(fp8kit._kernels.integer.x86_kernel) as native code.  It must give the bits of the scalar
oracle below (x86's conversions spelled out on Python integers; the kernel is also checked
against numpy's casts and the ONNX oracles in test_cast_*): every float32 exponent with
mantissas around zero, halves and ones, both signs, Inf and NaN; float64 values around every
power of two up to 2**70 and the integer ranges' edges."""

import math

import numpy as np
import pytest

import fp8kit
from fp8kit._kernels import integer
from fp8kit._kernels.codec import compiled_count, dummy

TARGETS = ["int8", "int16", "int32", "uint8", "uint16", "int64", "uint32", "uint64", "int4",
           "uint4", "uint32_vector", "int4_round", "uint4_round"]  # fmt: skip


def halves(dtype):
    """k + 1/2 for k in -40 .. 39 (int4's rounding ties) and their neighbours."""
    h = (np.arange(-40, 40) + 0.5).astype(dtype)
    return np.concatenate([h, np.nextafter(h, dtype(-np.inf)), np.nextafter(h, dtype(np.inf))])


def probes(dtype):
    return np.concatenate([_probes(dtype), halves(dtype.type)])


def _probes(dtype):
    if dtype == np.float32:
        e = np.arange(256, dtype=np.uint32) << 23
        m = np.array([0, 1, 2, 0x3FFFFF, 0x400000, 0x400001, 0x7FFFFE, 0x7FFFFF], np.uint32)
        bits = (e[:, None] | m).ravel()
        return np.concatenate([bits, bits | np.uint32(1 << 31)]).view(np.float32)
    p = np.exp2(np.arange(-3, 71, dtype=np.float64))
    edges = np.array([2.0**31 - 1, 2.0**32 - 1, 2.0**63 - 1024, 2.0**64 - 2048, 0.5, 1.5,
                      2.5, -0.5, np.inf, np.nan, 0.0, -0.0], np.float64)  # fmt: skip
    v = np.concatenate([p, p * 1.5, np.nextafter(p, 0), np.nextafter(p, np.inf), edges])
    return np.concatenate([v, -v])


def _cvt(t: float, bits: int) -> int:
    """x86's truncating conversion to a signed ``bits``-bit integer (cvttsd2si): the
    integer, or the smallest one (the "integer indefinite") for NaN, Inf and out of range."""
    if math.isfinite(t) and -(2 ** (bits - 1)) <= t < 2 ** (bits - 1):
        return int(t)
    return -(2 ** (bits - 1))


def _x86_oracle(v: float, target: str) -> int:
    """The integer (as the out type holds it, from its low bits) x86-64 numpy's scalar cast
    (or ONNX Runtime) gives for the float ``v``."""
    t = math.trunc(v) if math.isfinite(v) else v
    if target in ("int8", "int16", "uint8", "uint16", "int32"):
        return _cvt(t, 32)  # (the low bits of the int32 conversion)
    if target == "int64":
        return _cvt(t, 64)
    if target == "uint32":  # (numpy's scalar loop: through int64, NaN/Inf/range -> 0)
        return int(t) if math.isfinite(t) and -(2**63) < t < 2**63 else 0
    if target == "uint64":  # from 2**63 on, converted less 2**63, the top bit set
        return _cvt(t - 2**63, 64) ^ -(2**63) if t >= 2**63 else _cvt(t, 64)
    if target == "uint32_vector":  # ONNX Runtime's vectorised pattern
        if v >= 2**31:
            return _cvt(t - 2**31, 32) ^ (1 << 31)
        return _cvt(t, 32)
    signed = target.startswith("int4")
    if target.endswith("_round") and math.isfinite(v):  # half away from zero
        t = t + (1 if v > 0 else -1) if abs(v - t) >= 0.5 else t
        checked = t
    else:
        checked = v
    ok = not math.isnan(checked) and -(2.0**31) <= checked <= 2.0**31 - 1
    n = (int(t) if ok else -(2**31)) & 0xF
    return n - 16 if signed and n >= 8 else n


def _wrap(values, dtype) -> np.ndarray:
    """Python integers to ``dtype`` by their low bits."""
    bits = np.dtype(dtype).itemsize * 8
    low = np.array([v & ((1 << bits) - 1) for v in values], f"u{bits // 8}")
    return low.view(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("target", TARGETS)
def test_the_oracles_bits(target, dtype):
    x = probes(np.dtype(dtype))
    out_dtype = np.dtype(np.int8 if "int4" in target else target.split("_")[0])
    kernel = integer.x86_kernel(np.dtype(dtype), target)
    got = np.empty(x.size, out_dtype)
    kernel.serial(x, dummy(np.uint32), dummy(np.uint8), got)
    want = _wrap([_x86_oracle(float(v), target) for v in x], out_dtype)
    bad = np.flatnonzero(got != want)
    assert not bad.size, [(x[i], got[i], want[i]) for i in bad[:4]]


def test_cast_runs_it_threaded_at_every_length():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(300_001) * np.exp2(rng.integers(0, 40, 300_001))).astype(np.float32)
    for n in (0, 1, 15, 17, 1000, x.size):
        want = _wrap([_x86_oracle(float(v), "int16") for v in x[:n]], np.int16)
        for threads in (1, 2):
            with fp8kit.num_threads(threads):
                np.testing.assert_array_equal(fp8kit.cast(x[:n], np.int16), want)


def test_every_target_reads_x_and_out_alone():
    for target in integer._X86_MODES:
        for dtype in (np.float32, np.float64):
            assert integer.x86_kernel(np.dtype(dtype), target).xo
    x = np.linspace(-1e6, 1e6, 1001, dtype=np.float32)
    fp8kit.cast(x, np.int8)
    before = compiled_count()
    fp8kit.cast(x, np.int8)
    assert compiled_count() == before


SATURATING = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("target", SATURATING)
def test_saturating_gives_the_oracles_bits(target, dtype):
    """Cast's rules="legacy" conversion (clamped, NaN -> 0), on the same probes (every
    float32 exponent, the powers of two to 2**70 and each range's edges, both signs, Inf,
    NaN), against the clamp on Python integers."""
    x = probes(np.dtype(dtype))
    kernel = integer.saturating_kernel(np.dtype(dtype), np.dtype(target))
    assert kernel.xo
    got = np.empty(x.size, target)
    kernel.serial(x, dummy(np.uint32), dummy(np.uint8), got)
    info = np.iinfo(target)
    want = np.array([0 if math.isnan(v) else min(max(math.trunc(v) if math.isfinite(v) else v,
                     info.min), info.max) for v in map(float, x)], target)  # fmt: skip
    bad = np.flatnonzero(got != want)
    assert not bad.size, [(x[i], got[i], want[i]) for i in bad[:4]]
    info = np.iinfo(target)
    with np.errstate(invalid="ignore"):  # (numpy's own clamp, where it is exact)
        ref = np.where(np.isnan(x), 0, np.clip(np.trunc(x.astype(np.float64)), info.min, info.max))
    small = np.abs(ref) < 2.0**52
    np.testing.assert_array_equal(got[small], ref[small].astype(target))


def test_legacy_cast_is_native_and_threaded():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(300_001) * np.exp2(rng.integers(0, 40, 300_001))).astype(np.float32)
    x[::1000] = np.nan
    want = np.where(np.isnan(x), 0, np.clip(np.trunc(x), -(2**15), 2**15 - 1)).astype(np.int16)
    for n in (0, 1, 15, 17, 1000, x.size):
        for threads in (1, 2):
            with fp8kit.num_threads(threads):
                got = fp8kit.cast(x[:n], np.int16, rules="legacy")
                np.testing.assert_array_equal(got, want[:n])
