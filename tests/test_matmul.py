"""fp8kit.matmul against independent references, bit for bit.

* Instructions: MMA-Sim (``mmasim`` 2.1.1) run as a kernel runs it: its instruction on
  each m x n tile of zero-padded operands, over successive k-wide slices of K, each D the
  next C (Hopper's fp8 and bf16 wgmma, Ada's fp8 mma, f16 accumulators, RTX Blackwell's
  block-scaled mma with its scales read per step), on M and N that are not multiples of the
  tile.
* Promotion: chunks of ``promote_every`` chained from +0 by MMA-Sim, added into float32 by
  fused multiply-adds emulated exactly with ``fractions.Fraction``; also mmaemu's
  ``accumulate`` (cuBLAS's slow accumulation on the H100 and RTX 4060).
* The accumulators that are not hardware: ``"exact"`` against the Fraction sum rounded once
  to float32, ``"fp32"`` against a loop of exact float32 fmas, ``"fp32-pairwise"`` against
  a numpy balanced tree.
* Epilogue scales, float16/bfloat16 outputs, and the errors.
"""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

mmasim = pytest.importorskip("mmasim")
torch = pytest.importorskip("torch")
from mmasim import nv_ptx  # noqa: E402

import fp8kit  # noqa: E402
from fp8kit import mma  # noqa: E402

E4 = np.dtype(ml_dtypes.float8_e4m3fn)
E5 = np.dtype(ml_dtypes.float8_e5m2)
E2M1 = np.dtype(ml_dtypes.float4_e2m1fn)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
NP = {"e4m3": E4, "e5m2": E5, "e2m1": E2M1, "bf16": BF16, "f16": F16, "f32": F32,
      "ue8m0": E8M0}  # fmt: skip
_TORCH = {
    E4: torch.float8_e4m3fn,
    E5: torch.float8_e5m2,
    E8M0: torch.float8_e8m0fnu,
    BF16: torch.bfloat16,
    F16: torch.float16,
    F32: torch.float32,
}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_INT = {1: (np.uint8, torch.uint8), 2: (np.int16, torch.int16), 4: (np.int32, torch.int32)}

HOPPER_E4 = ("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
HOPPER_E5E4 = ("Hopper", "wgmma", "m64n8k32.f32.e5m2.e4m3")
HOPPER_F16ACC = ("Hopper", "wgmma", "m64n8k32.f16.e4m3.e5m2")
HOPPER_BF16 = ("Hopper", "wgmma", "m64n8k16.f32.bf16.bf16")
ADA_E4 = ("Ada Lovelace", "mma", "m16n8k32.f32.e4m3.e4m3.f32")
ADA_E4E5 = ("Ada Lovelace", "mma", "m16n8k32.f32.e4m3.e5m2.f32")
ADA_F16ACC = ("Ada Lovelace", "mma", "m16n8k32.f16.e5m2.e4m3.f16")
RTXB_MX = ("RTX Blackwell", "mma.block_scale",
           "m16n8k32.kind::mxf8f6f4.block32.f32.e4m3.e4m3.f32.ue8m0")  # fmt: skip
RTXB_MX_FP4 = ("RTX Blackwell", "mma.block_scale",
               "m16n8k32.kind::mxf8f6f4.block32.f32.e5m2.e2m1.f32.ue8m0")  # fmt: skip
CHAINED = [HOPPER_E4, HOPPER_E5E4, HOPPER_F16ACC, HOPPER_BF16, ADA_E4, ADA_E4E5, ADA_F16ACC]


def _id(t) -> str:
    return f"{t[0].replace(' ', '')}-{t[1]}-{t[2]}"


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def bits(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.view(_UINT[x.dtype.itemsize])


def canonical(x: np.ndarray) -> np.ndarray:
    """x with NaN written as the canonical NaN of its type."""
    x = np.array(x)
    nan = np.isnan(x.astype(np.float32))
    bits(x)[nan] = {4: 0x7FFFFFFF, 2: 0x7FFF}[x.dtype.itemsize]
    return x


def assert_bits(got: np.ndarray, want: np.ndarray, what: str):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    g, w = bits(got), bits(want)
    bad = np.argwhere(g != w)
    if len(bad):
        i, j = bad[0]
        raise AssertionError(
            f"{what}: {len(bad)} of {g.size} outputs differ; first at {(i, j)}: fp8kit "
            f"{g[i, j]:#x} ({float(got[i, j].astype(np.float64))!r}), reference {w[i, j]:#x} "
            f"({float(want[i, j].astype(np.float64))!r})"
        )


# -- numpy <-> torch -------------------------------------------------------------------------------
def to_torch(x: np.ndarray):
    x = np.ascontiguousarray(x)
    ni, _ = _INT[x.dtype.itemsize]
    return torch.from_numpy(x.view(ni).copy()).view(_TORCH[x.dtype])


def from_torch(t) -> np.ndarray:
    _, ti = _INT[t.element_size()]
    dt = {v: k for k, v in _TORCH.items()}[t.dtype]
    return t.contiguous().view(ti).numpy().view(dt)


# -- operands --------------------------------------------------------------------------------------
def _finite_codes(dt):
    n = 2 ** (8 * dt.itemsize) if dt.itemsize <= 2 else 0
    codes = np.arange(n, dtype=np.uint64).astype(_UINT[dt.itemsize])
    if dt == E2M1:
        codes = np.arange(16, dtype=np.uint8)
    with np.errstate(invalid="ignore"):
        v = codes.view(dt).astype(np.float64)
    return codes[np.isfinite(v)], v[np.isfinite(v)]


def _info(dt):
    fi = ml_dtypes.finfo(dt) if dt not in (F16, F32, F64) else np.finfo(dt)
    return float(fi.max), float(fi.smallest_normal), float(fi.smallest_subnormal)


def _cast(v, dt):
    mx = _info(dt)[0]
    with np.errstate(over="ignore", invalid="ignore"):
        return np.clip(v, -mx, mx).astype(dt)


ROW_MODES = ("codes", "spread", "sub", "zero", "max", "ints", "narrow", "cancel", "flat")


def rows(dt, n, k, rng, modes=ROW_MODES, specials=0) -> np.ndarray:
    """n x k of a float type, each row in one of ``modes`` (cycled from a random start):
    random finite codes, exponents across the type's range (at most +-60 for the wide
    types), subnormals, mostly +-0, +-max, small integers and halves (exact sums, ties), one
    binade, a +-max pair among small values, one value repeated.  ``specials`` rows hold
    NaN (and +-Inf where the type has it)."""
    dt = np.dtype(dt)
    mx, tiny, sub = _info(dt)
    emin, emax = int(np.round(np.log2(sub))), int(np.floor(np.log2(mx)))
    lo, hi = max(emin, -60), min(emax, 60)
    out = np.zeros((n, k), dt)
    start = int(rng.integers(len(modes)))
    for r in range(n):
        mode = modes[(start + r) % len(modes)]
        if mode == "codes":
            if dt.itemsize <= 2:
                x = rng.choice(_finite_codes(dt)[0], k).view(dt)
            else:
                u = _UINT[dt.itemsize]
                raw = rng.integers(0, np.iinfo(u).max, k, dtype=u, endpoint=True)
                x = raw.view(dt)
                bad = ~np.isfinite(x)
                raw[bad] ^= u(1) << u(8 * dt.itemsize - 2)
                x = raw.view(dt)
                if dt == F64:  # (keep float64 products inside float64's range)
                    x = _cast(np.clip(np.abs(x), 1e-140, 1e140) * np.sign(x), dt)
        elif mode == "spread":
            e = rng.integers(lo, hi + 1, k).astype(np.float64)
            x = _cast(rng.standard_normal(k) * 2.0**e, dt)
        elif mode == "sub":
            if dt.itemsize <= 2:
                codes, v = _finite_codes(dt)
                x = rng.choice(codes[np.abs(v) < tiny], k).view(dt)
            else:
                x = _cast(rng.random(k) * tiny * np.where(rng.random(k) < 0.5, -1, 1), dt)
            few = rng.random(k) < 0.2
            x[few] = _cast(rng.standard_normal(k) * 4 * tiny, dt)[few]
        elif mode == "zero":
            x = np.where(rng.random(k) < 0.5, -0.0, 0.0).astype(dt)
            few = rng.random(k) < 0.1
            x[few] = _cast(rng.standard_normal(k), dt)[few]
        elif mode == "max":
            top = min(mx, 2.0**60)
            x = _cast(np.where(rng.random(k) < 0.5, -top, top), dt)
            few = rng.random(k) < 0.5
            x[few] = _cast(rng.standard_normal(k) * 2.0 ** rng.integers(-8, 2), dt)[few]
        elif mode == "ints":
            x = _cast(rng.integers(-6, 7, k) * 0.5 * 2.0 ** rng.integers(-2, 3), dt)
        elif mode == "narrow":
            e = int(rng.integers(-4, 5))
            x = _cast((1 + rng.random(k)) * np.where(rng.random(k) < 0.5, -1, 1) * 2.0**e, dt)
        elif mode == "cancel" and k >= 2:
            top = min(mx, 2.0**40)
            x = _cast(rng.standard_normal(k) * 2.0 ** rng.integers(-12, -2), dt)
            i, j = rng.choice(k, 2, replace=False)
            x[i], x[j] = _cast(np.array([top, -top]), dt)
        else:  # "flat" (and "cancel" below two elements)
            x = np.full(k, _cast(np.array([rng.choice([1.0, -0.5, 3.0])]), dt)[0], dt)
        out[r] = x
    nonfinite = [np.nan] + ([np.inf, -np.inf] if dt not in (E4, E2M1) else [])
    for _ in range(specials if dt != E2M1 and k else 0):
        r = int(rng.integers(n))
        for i in rng.choice(k, min(k, 2), replace=False):
            out[r, i] = np.array(nonfinite[int(rng.integers(len(nonfinite)))]).astype(dt)
    return out


def operands(inst, m, n, k, rng, specials=1):
    a = rows(NP[inst.a_type], m, k, rng, specials=specials)
    b = np.ascontiguousarray(rows(NP[inst.b_type], n, k, rng, specials=specials).T)
    return a, b


def c_matrix(dt, m, n, rng) -> np.ndarray:
    """C: normal values of many magnitudes, +-0, tiny and huge ones."""
    dt = np.dtype(dt)
    mx, _, sub = _info(dt)
    g = rng.standard_normal((m, n))
    mode = rng.integers(0, 6, (m, n))
    v = np.choose(mode, [g, g * 2.0 ** rng.integers(-20, 20, (m, n)), np.zeros((m, n)),
                         np.full((m, n), -0.0), g * sub * 4, g * mx / 4])  # fmt: skip
    return _cast(v, dt)


def block_scales(shape, rng) -> np.ndarray:
    """ue8m0 scales: mostly near 1, some across the whole range and its extremes."""
    n = int(np.prod(shape))
    mode = rng.choice(4, n, p=[0.4, 0.35, 0.15, 0.1])
    cand = [np.full(n, 127), 127 + rng.integers(-8, 9, n), rng.integers(0, 255, n),
            np.array([0, 254, 1, 253])[rng.integers(0, 4, n)]]  # fmt: skip
    return np.choose(mode, cand).astype(np.uint8).reshape(shape).view(E8M0)


# -- MMA-Sim, chained as a kernel chains it --------------------------------------------------------
_ORACLES: dict = {}
_CLASS = {"wgmma": nv_ptx.WGMMA, "mma": nv_ptx.MMA, "mma.block_scale": nv_ptx.MMABlockScale}


def oracle(key):
    if key not in _ORACLES:
        _ORACLES[key] = _CLASS[key[1]](key[0], key[2])
    return _ORACLES[key]


def _mmasim_operand(x: np.ndarray):
    if x.dtype == E2M1:  # MMA-Sim takes fp4 as uint8 codes in bits 5:2
        return torch.from_numpy((x.view(np.uint8) & np.uint8(0xF)) << np.uint8(2))
    return to_torch(x)


def _pad(x, rows, cols):
    out = np.zeros((rows, cols), x.dtype)
    out[: x.shape[0], : x.shape[1]] = x
    return out


def chain_mmasim(key, a, b, c, scale_a=None, scale_b=None, k0=0, k1=None) -> np.ndarray:
    """D after MMA-Sim's instruction over K slices [k0, k1) in order, each step's D the next
    step's C, tile by tile over zero-padded M x N (outputs are independent)."""
    inst = mma.instruction(*key)
    op = oracle(key)
    m, n = c.shape
    k1 = a.shape[1] if k1 is None else k1
    mp, np_ = -(-m // inst.m) * inst.m, -(-n // inst.n) * inst.n
    ap, bp = _pad(a, mp, a.shape[1]), _pad(b, b.shape[0], np_)
    d = to_torch(_pad(c, mp, np_))
    if scale_a is not None:
        sap = _pad(scale_a, mp, scale_a.shape[1])
        sbp = _pad(scale_b, scale_b.shape[0], np_)
    for s in range(k0, k1, inst.k):
        nxt = torch.empty_like(d)
        for i in range(0, mp, inst.m):
            for j in range(0, np_, inst.n):
                args = [_mmasim_operand(ap[i : i + inst.m, s : s + inst.k]),
                        _mmasim_operand(bp[s : s + inst.k, j : j + inst.n]),
                        d[i : i + inst.m, j : j + inst.n].contiguous()]  # fmt: skip
                if scale_a is not None:
                    blk = slice(s // inst.block, (s + inst.k) // inst.block)
                    args += [to_torch(sap[i : i + inst.m, blk]),
                             to_torch(sbp[blk, j : j + inst.n])]  # fmt: skip
                nxt[i : i + inst.m, j : j + inst.n] = op(*args)
        d = nxt
    return from_torch(d)[:m, :n]


# -- exact float32 arithmetic with Fractions -------------------------------------------------------
F32_MAX = Fraction(float(np.finfo(np.float32).max))


def round_f32(q: Fraction) -> np.float32:
    """The nearest float32 to a nonzero rational, ties to even, Inf beyond float32's range
    (past the midpoint between its max and 2**128)."""
    sign = -1 if q < 0 else 1
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    e = max(e, -126)
    quantum = Fraction(2) ** (e - 23)
    r = round(q / quantum)  # (Fraction rounding: half to even)
    v = r * quantum
    if v > F32_MAX:
        return np.float32(sign * math.inf)
    return np.float32(sign * float(v))


def fma_f32(x, y, z) -> np.float32:
    """fma(x, y, z) of float32 values, rounded once (IEEE 754, round to nearest-even)."""
    x, y, z = np.float32(x), np.float32(y), np.float32(z)
    with np.errstate(all="ignore"):
        f64 = np.float64(x) * np.float64(y) + np.float64(z)
    if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
        return np.float32(f64)  # (the product of float32 values is exact in float64)
    q = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
    if q == 0:  # x * y exact, its sum with z exactly zero: float64 has IEEE's sign of zero
        return np.float32(f64)
    return round_f32(q)


# -- (a) the instruction chained over K ------------------------------------------------------------
@pytest.mark.parametrize("key", CHAINED, ids=_id)
def test_chain_vs_mmasim(key):
    inst = mma.instruction(*key)
    rng = _rng("chain", key)
    m, n = inst.m + inst.m // 2 + 3, inst.n + 5  # (not multiples of the tile)
    k = 5 * inst.k
    a, b = operands(inst, m, n, k, rng)
    c = c_matrix(NP[inst.c_type], m, n, rng)
    want = chain_mmasim(key, a, b, c)  # (of the D type)
    od = want.dtype
    assert_bits(fp8kit.matmul(a, b, c, instruction=key, out_dtype=od), want, "with c")
    assert_bits(fp8kit.matmul(a, b, c, instruction=inst, out_dtype=od), want, "an Instruction")
    # the default output is float32 (a float16 D widened, NaN canonical)
    assert_bits(fp8kit.matmul(a, b, c, instruction=key), canonical(want.astype(F32)), "f32 out")
    zero = np.zeros((m, n), NP[inst.c_type])
    assert_bits(fp8kit.matmul(a, b, instruction=key, out_dtype=od),
                chain_mmasim(key, a, b, zero), "c = 0")  # fmt: skip


@settings(max_examples=8, deadline=None, derandomize=True)
@given(m=st.integers(1, 70), n=st.integers(1, 20), steps=st.integers(0, 4),
       seed=st.integers(0, 2**32 - 1), which=st.sampled_from([HOPPER_E4, ADA_E4E5]))  # fmt: skip
def test_chain_shapes(m, n, steps, seed, which):
    """Any M and N (one row, one column, K = 0 included)."""
    inst = mma.instruction(*which)
    rng = np.random.default_rng(seed)
    a, b = operands(inst, m, n, steps * inst.k, rng, specials=int(rng.integers(2)))
    c = c_matrix(F32, m, n, rng)
    got = fp8kit.matmul(a, b, c, instruction=which)
    assert_bits(got, chain_mmasim(which, a, b, c) if steps else c, "shapes")
    got = fp8kit.matmul(a, b, c, instruction=which, out_dtype=BF16)
    with np.errstate(all="ignore"):
        want = (chain_mmasim(which, a, b, c) if steps else c).astype(BF16)
    assert_bits(got, canonical(want), "shapes, bfloat16")


# -- (b) promotion ---------------------------------------------------------------------------------
def promoted_reference(key, a, b, c, nc, ga=None, gb=None) -> np.ndarray:
    """Chunks of nc chained by MMA-Sim from +0, added into float32 by exact fmas with the
    group's RN32(sa * sb) (1 without scales), c the first accumulator."""
    inst = mma.instruction(*key)
    m, n = a.shape[0], b.shape[1]
    k = a.shape[1]
    acc = np.zeros((m, n), np.float32) if c is None else c.astype(np.float32)
    zero = np.zeros((m, n), NP[inst.c_type])
    for g in range(k // nc):
        part = chain_mmasim(key, a, b, zero, k0=g * nc, k1=(g + 1) * nc).astype(np.float32)
        if ga is None:
            with np.errstate(all="ignore"):
                acc = (acc + part).astype(np.float32)  # fma(1, part, acc): one rounding
            continue
        with np.errstate(all="ignore"):
            s = ga[:, g : g + 1].astype(np.float32) * gb[g : g + 1, :].astype(np.float32)
        acc = np.array([[fma_f32(s[i, j], part[i, j], acc[i, j]) for j in range(n)]
                        for i in range(m)], np.float32).reshape(m, n)  # fmt: skip
    return canonical(acc)


@pytest.mark.parametrize("key", [HOPPER_E4, ADA_E4, HOPPER_BF16, HOPPER_F16ACC], ids=_id)
def test_promote_every(key):
    inst = mma.instruction(*key)
    rng = _rng("promote", key)
    m, n, nc = 19, 11, 4 * inst.k
    a, b = operands(inst, m, n, 3 * nc, rng)
    c = c_matrix(F32, m, n, rng)
    got = fp8kit.matmul(a, b, c if inst.c_type == "f32" else None, instruction=key,
                        promote_every=nc)  # fmt: skip
    want = promoted_reference(key, a, b, c if inst.c_type == "f32" else None, nc)
    assert_bits(got, want, "promote_every")


@pytest.mark.parametrize("profile,key", [("hopper", HOPPER_E4), ("ada", ADA_E4),
                                         ("hopper", HOPPER_E5E4)])  # fmt: skip
def test_promote_every_is_cublas_slow_accumulation(profile, key):
    """promote_every=128 is mmaemu's slow accumulation of an unsplit cuBLAS GEMM."""
    import warnings

    mmaemu = pytest.importorskip("mmaemu")
    inst = mma.instruction(*key)
    rng = _rng("slow", profile, key)
    a, b = operands(inst, 37, 24, 640, rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = mmaemu.accumulate(to_torch(a), to_torch(np.ascontiguousarray(b.T)),
                                 use_fast_accum=False, profile=profile, splitk=1)  # fmt: skip
        fast = mmaemu.accumulate(to_torch(a), to_torch(np.ascontiguousarray(b.T)),
                                 use_fast_accum=True, profile=profile, splitk=1)  # fmt: skip
    assert_bits(fp8kit.matmul(a, b, instruction=key, promote_every=128), from_torch(want),
                "slow accumulation")  # fmt: skip
    assert_bits(fp8kit.matmul(a, b, instruction=key), from_torch(fast), "fast accumulation")


GROUP_SCALES = [
    ("full", lambda m, g, n, r: (_gscale(r, (m, g)), _gscale(r, (g, n)))),
    ("1x128 by 128x128", lambda m, g, n, r: (_gscale(r, (m, g)), _gscale(r, (g, 1)))),
    ("scalar a", lambda m, g, n, r: (np.float32(0.375), _gscale(r, (g, n)))),
    ("b only", lambda m, g, n, r: (None, _gscale(r, (1, n)))),
    (
        "float64 holding float32",
        lambda m, g, n, r: (_gscale(r, (m, g)).astype(np.float64), _gscale(r, (g, n))),
    ),  # fmt: skip
]


def _gscale(rng, shape) -> np.ndarray:
    """float32 scales: non-powers of two near 1, some tiny, huge, zero and non-finite."""
    v = np.exp(rng.standard_normal(shape)).astype(np.float32)
    pick = rng.random(shape)
    v = np.where(pick < 0.08, np.float32(3e-39), v)  # (subnormal: the products underflow)
    v = np.where((pick > 0.08) & (pick < 0.14), np.float32(2.5e37), v)
    v = np.where((pick > 0.14) & (pick < 0.17), np.float32(0.0), v)
    v = np.where((pick > 0.17) & (pick < 0.19), -v, v)
    v = np.where((pick > 0.19) & (pick < 0.2), np.float32(np.inf), v)
    return v.astype(np.float32)


@pytest.mark.parametrize("case", GROUP_SCALES, ids=lambda c: c[0])
def test_promote_every_group_scales(case):
    """acc = fma(RN32(sa * sb), partial, acc) at every promotion (DeepSeek-V3's scales)."""
    name, make = case
    key = HOPPER_E4
    rng = _rng("groups", name)
    m, n, nc, g = 9, 10, 64, 3
    a, b = operands(mma.instruction(*key), m, n, g * nc, rng, specials=0)
    c = c_matrix(F32, m, n, rng)
    sa, sb = make(m, g, n, rng)
    got = fp8kit.matmul(a, b, c, instruction=key, promote_every=nc, scale_a=sa, scale_b=sb)
    ga = np.broadcast_to(np.float32(1.0) if sa is None else np.asarray(sa, np.float32), (m, g))
    gb = np.broadcast_to(np.float32(1.0) if sb is None else np.asarray(sb, np.float32), (g, n))
    assert_bits(got, promoted_reference(key, a, b, c, nc, ga, gb), name)


# -- (c), (d) the accumulators that are not hardware -----------------------------------------------
def _nonfinite_reference(arow, bcol, c) -> np.float32:
    """IEEE's value of c + sum a*b where a term is not finite (float64 arithmetic: the
    products of these inputs are exact there and the finite ones cannot overflow)."""
    with np.errstate(all="ignore"):
        total = np.float64(c)
        for x, y in zip(arow, bcol, strict=True):
            total = total + np.float64(x) * np.float64(y)
        return np.float32(total)


def exact_reference(a, b, c) -> np.ndarray:
    m, n = c.shape
    out = np.empty((m, n), np.float32)
    av, bv = a.astype(np.float64), b.astype(np.float64)
    for i in range(m):
        for j in range(n):
            row, col = av[i], bv[:, j]
            if not (np.isfinite(row).all() and np.isfinite(col).all() and np.isfinite(c[i, j])):
                out[i, j] = _nonfinite_reference(row, col, c[i, j])
                continue
            terms = [Fraction(float(x)) * Fraction(float(y)) for x, y in zip(row, col, strict=True)]
            q = sum(terms, Fraction(float(c[i, j])))
            # an exact zero sum: +0 (as the fused models write it); no terms at all: c
            out[i, j] = (np.float32(0.0) if a.shape[1] else c[i, j]) if q == 0 else round_f32(q)
    return canonical(out)


EXACT_DTYPES = [(F32, F32), (F64, F64), (BF16, BF16), (F16, F16), (E4, E5), (E2M1, E4),
                (F16, BF16), (F32, E5)]  # fmt: skip


@pytest.mark.parametrize("dtypes", EXACT_DTYPES, ids=lambda d: f"{d[0].name}x{d[1].name}")
def test_exact(dtypes):
    da, db = dtypes
    rng = _rng("exact", da.name, db.name)
    m, n, k = 12, 9, 37
    a = rows(da, m, k, rng, specials=1)
    b = np.ascontiguousarray(rows(db, n, k, rng, specials=1).T)
    c = c_matrix(F32, m, n, rng)
    got = fp8kit.matmul(a, b, c, instruction="exact")
    assert_bits(got, exact_reference(a, b, c), "exact")


def test_exact_cancellation():
    a = np.array([[1e30, 1.0, -1e30], [3e38, 3e38, -3e38], [2.0**-149, 1.0, -1.0],
                  [1.0, 2.0**-24, 2.0**-60], [1.0, 2.0**-24, -(2.0**-60)],
                  [1.0, 2.0**-24, 0.0], [np.inf, 1.0, -1e30]], np.float32)  # fmt: skip
    b = np.ones((3, 2), np.float32)
    b[:, 1] = [1.0, -1.0, 1.0]
    c = np.zeros((7, 2), np.float32)
    c[4, 1] = -0.0
    got = fp8kit.matmul(a, b, c, instruction="exact")
    want = exact_reference(a, b, c)
    assert_bits(got, want, "cancellation")
    assert got[0, 0] == 1.0 and got[1, 0] == np.float32(3e38) and got[2, 0] == 2.0**-149
    assert got[3, 0] == np.float32(1 + 2.0**-23)  # (the tie broken by 2**-60: up)
    assert got[4, 0] == 1.0 and got[5, 0] == 1.0  # (below the tie; a tie: even)


def test_exact_overflow_threshold():
    """max + half an ulp is the overflow threshold (a tie: Inf); a hair below it rounds to
    max."""
    big = float(np.finfo(np.float32).max)
    half_ulp = 2.0 ** (127 - 24)
    a = np.array([[big, half_ulp, -1e-30], [big, half_ulp, 0.0], [big, half_ulp, 1e-30]])
    got = fp8kit.matmul(a, np.ones((3, 1)), instruction="exact")
    assert np.isposinf(got[1, 0]) and np.isposinf(got[2, 0])
    assert got[0, 0] == np.float32(big)


@pytest.mark.xfail(strict=True, reason="documented limit of 'exact': float64 products "
                   "must stay in float64's range (the sum splits each product with fma); "
                   "float32 and narrower inputs always do")  # fmt: skip
def test_exact_float64_products_beyond_float64():
    a = np.array([[1e200, 1e200], [1.0, 2.0**-24]])
    b = np.array([[1e200, 1e-200], [-1e200, 1.0]])
    c = np.zeros((2, 2), np.float32)
    c[1, 1] = 0.0
    a2 = np.array([[1.0, 2.0**-24, 1e-200]])
    b2 = np.array([[1.0], [1.0], [1e-200]])  # (1 + 2**-24 + 1e-400: above the tie)
    assert fp8kit.matmul(a[:1], b[:, :1], instruction="exact")[0, 0] == 0.0
    assert fp8kit.matmul(a2, b2, instruction="exact")[0, 0] == np.float32(1 + 2.0**-23)


def fp32_chain_reference(a, b, c) -> np.ndarray:
    """c, then fma(a_k, b_k, acc) in float32 for k in order (inputs rounded to float32)."""
    m, n = c.shape
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    out = np.empty((m, n), np.float32)
    for i in range(m):
        for j in range(n):
            acc = np.float32(c[i, j])
            for x, y in zip(a32[i], b32[:, j], strict=True):
                acc = fma_f32(x, y, acc)
            out[i, j] = acc
    return out


@pytest.mark.parametrize("dtypes", [(F32, F32), (BF16, E4), (F16, F16)],
                         ids=lambda d: f"{d[0].name}x{d[1].name}")  # fmt: skip
def test_fp32_chain(dtypes):
    da, db = dtypes
    rng = _rng("fp32", da.name, db.name)
    m, n, k = 10, 7, 29
    a = rows(da, m, k, rng, specials=1)
    b = np.ascontiguousarray(rows(db, n, k, rng, specials=1).T)
    c = c_matrix(F32, m, n, rng)
    got = fp8kit.matmul(a, b, c, instruction="fp32")
    want = fp32_chain_reference(a, b, c)
    nan = np.isnan(want)  # (an fma chain's NaN is whatever IEEE gives: compare NaN-ness)
    np.testing.assert_array_equal(np.isnan(got), nan)
    assert_bits(np.where(nan, 0, got).astype(np.float32), np.where(nan, 0, want), "fp32")


def test_fp32_chain_rounds_every_step():
    """1 + 2**-24 + 2**-24: float32 steps round each tie to 1.0; a float64 chain keeps
    2**-23."""
    a = np.array([[1.0, 2.0**-24, 2.0**-24]], np.float32)
    b = np.ones((3, 1), np.float32)
    got = fp8kit.matmul(a, b, instruction="fp32")
    assert got[0, 0] == 1.0 == fp32_chain_reference(a, b, np.zeros((1, 1), np.float32))[0, 0]


def pairwise_reference(a, b, c) -> np.ndarray:
    """float32 products summed by a balanced binary tree: K split into blocks of the powers
    of two of its binary digits (largest first), each block summed by pairs of neighbours,
    level by level; the blocks' sums added from the last (smallest) to the first, then c."""
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    k = a.shape[1]
    with np.errstate(all="ignore"):
        prods = a32[:, None, :] * np.ascontiguousarray(b32.T)[None, :, :]  # M x N x K
        roots, start = [], 0
        for p in range(k.bit_length() - 1, -1, -1):
            if k >> p & 1:
                level = prods[:, :, start : start + 2**p]
                while level.shape[2] > 1:
                    level = level[:, :, 0::2] + level[:, :, 1::2]
                roots.append(level[:, :, 0])
                start += 2**p
        if not roots:
            return c.copy()
        total = roots[-1]
        for r in roots[-2::-1]:
            total = (r + total).astype(np.float32)
        return (c + total).astype(np.float32)


@pytest.mark.parametrize("k", [1, 2, 7, 8, 29, 64, 100])
def test_fp32_pairwise(k):
    rng = _rng("pairwise", k)
    m, n = 8, 6
    a = rows(F32, m, k, rng, specials=1)
    b = np.ascontiguousarray(rows(BF16, n, k, rng, specials=1).T)
    c = c_matrix(F32, m, n, rng)
    got = fp8kit.matmul(a, b, c, instruction="fp32-pairwise")
    want = pairwise_reference(a, b, c)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    assert_bits(np.where(nan, 0, got).astype(np.float32), np.where(nan, 0, want), "pairwise")


def test_pairwise_order():
    """The tree's order shows: 1 + 1 + ... + 2**24 by pairs gives 2**24 + 6 (the pair
    (1, 2**24) is a tie, to even), sequentially 2**24 + 8 (7 + 2**24, a tie), exactly 2**24 + 7
    (to even: 2**24 + 8)."""
    a = np.array([[1.0] * 7 + [2.0**24]], np.float32)
    b = np.ones((8, 1), np.float32)
    assert fp8kit.matmul(a, b, instruction="fp32-pairwise")[0, 0] == 2.0**24 + 6
    assert pairwise_reference(a, b, np.zeros((1, 1), np.float32))[0, 0] == 2.0**24 + 6
    assert fp8kit.matmul(a, b, instruction="exact")[0, 0] == 2.0**24 + 8
    # three: (x + 1) is the first root's pair, 1 the second root: (x + 1) + 1 = x
    a3 = np.array([[2.0**24, 1.0, 1.0]], np.float32)
    got = fp8kit.matmul(a3, np.ones((3, 1), np.float32), instruction="fp32-pairwise")
    assert got[0, 0] == 2.0**24


def test_accumulators_zero_k():
    c = np.array([[1.5, -0.0]], np.float32)
    for acc in ("exact", "fp32", "fp32-pairwise"):
        got = fp8kit.matmul(np.zeros((1, 0), np.float32), np.zeros((0, 2), np.float32), c,
                            instruction=acc)  # fmt: skip
        assert_bits(got, c, acc)


# -- (e) block-scaled instructions -----------------------------------------------------------------
@pytest.mark.parametrize("key", [RTXB_MX, RTXB_MX_FP4], ids=_id)
def test_block_scaled_chain(key):
    inst = mma.instruction(*key)
    rng = _rng("block", key)
    m, n, k = 21, 11, 4 * inst.k
    a, b = operands(inst, m, n, k, rng)
    c = c_matrix(F32, m, n, rng)
    sa = block_scales((m, k // inst.block), rng)
    sb = block_scales((k // inst.block, n), rng)
    got = fp8kit.matmul(a, b, c, instruction=key, scale_a=sa, scale_b=sb)
    assert_bits(got, chain_mmasim(key, a, b, c, sa, sb), "block scaled")


@pytest.mark.parametrize("key", [RTXB_MX, RTXB_MX_FP4], ids=_id)
def test_block_scaled_promoted(key):
    """Chunks of 64 from +0 (their block scales read inside), added in fp32."""
    inst = mma.instruction(*key)
    rng = _rng("block promoted", key)
    m, n, k = 21, 11, 4 * inst.k
    a, b = operands(inst, m, n, k, rng)
    c = c_matrix(F32, m, n, rng)
    sa = block_scales((m, k // inst.block), rng)
    sb = block_scales((k // inst.block, n), rng)
    got = fp8kit.matmul(a, b, c, instruction=key, scale_a=sa, scale_b=sb, promote_every=64)
    zero = np.zeros((m, n), np.float32)
    acc = c.copy()
    for g in range(k // 64):
        part = chain_mmasim(key, a, b, zero, sa, sb, k0=64 * g, k1=64 * (g + 1))
        with np.errstate(all="ignore"):
            acc = (acc + part).astype(np.float32)
    assert_bits(got, canonical(acc), "block scaled, promoted")


# -- (f) epilogue scales and output types ----------------------------------------------------------
EPILOGUE = [
    ("scalars", lambda m, n, r: (np.float32(0.3), np.float32(7.1))),
    ("python floats", lambda m, n, r: (1.5, -2.25)),
    ("rows", lambda m, n, r: (_gscale(r, (m, 1)), None)),
    ("columns", lambda m, n, r: (None, _gscale(r, (1, n)))),
    ("rows and columns", lambda m, n, r: (_gscale(r, (m, 1)), _gscale(r, (1, n)))),
    ("1-D columns", lambda m, n, r: (np.float32(3.0), _gscale(r, (n,)))),
]


@pytest.mark.parametrize("case", EPILOGUE, ids=lambda c: c[0])
@pytest.mark.parametrize("key", [HOPPER_E4, HOPPER_F16ACC], ids=_id)
def test_epilogue_scales(case, key):
    """y = RN32(acc * RN32(sa * sb)) (+0 for an exact zero), then the output type."""
    name, make = case
    inst = mma.instruction(*key)
    rng = _rng("epilogue", name, key)
    m, n = 13, 10
    a, b = operands(inst, m, n, 2 * inst.k, rng)
    sa, sb = make(m, n, rng)
    acc = chain_mmasim(key, a, b, np.zeros((m, n), NP[inst.c_type])).astype(np.float32)
    ea = np.float32(1.0) if sa is None else np.asarray(sa, np.float32)
    eb = np.float32(1.0) if sb is None else np.asarray(sb, np.float32)
    with np.errstate(all="ignore"):
        alpha = np.broadcast_to(ea.reshape(-1, 1) if ea.ndim == 2 else ea, (m, 1)) * \
            np.broadcast_to(eb.reshape(1, -1) if eb.ndim else eb, (1, n))  # fmt: skip
        y = acc.astype(np.float64) * alpha.astype(np.float32).astype(np.float64) + 0.0
        y = canonical(y.astype(np.float32))
        for od in (F32, F16, BF16):
            got = fp8kit.matmul(a, b, instruction=key, scale_a=sa, scale_b=sb, out_dtype=od)
            assert_bits(got, canonical(y.astype(od)), f"{name} -> {od.name}")


@pytest.mark.parametrize("key", [HOPPER_E4, HOPPER_F16ACC, HOPPER_BF16], ids=_id)
def test_out_dtype(key):
    """float16 and bfloat16 outputs: the instruction's result rounded to nearest-even (Inf
    beyond float16's range, NaN canonical)."""
    inst = mma.instruction(*key)
    rng = _rng("out", key)
    m, n = 9, 12
    a, b = operands(inst, m, n, 3 * inst.k, rng)
    c = c_matrix(NP[inst.c_type], m, n, rng)
    if inst.c_type == "f32":
        c[0, :4] = [70000.0, 65520.0, 65519.0, 1e-8]  # (beyond float16, its rounding edge)
    d = chain_mmasim(key, a, b, c)
    with np.errstate(all="ignore"):
        for od in (F16, BF16, F32):
            got = fp8kit.matmul(a, b, c, instruction=key, out_dtype=od)
            assert_bits(got, canonical(d.astype(od)), od.name)


# -- (g) errors ------------------------------------------------------------------------------------
def test_errors_k_and_promotion():
    a = np.ones((4, 48), E4)
    b = np.ones((48, 8), E4)
    with pytest.raises(ValueError, match=r"K=48.*k=32"):
        fp8kit.matmul(a, b, instruction=HOPPER_E4)
    a, b = np.ones((4, 256), E4), np.ones((256, 8), E4)
    for bad in (96, 48, 0, -128, 512):
        with pytest.raises(ValueError, match=rf"promote_every={bad}.*k=32.*K=256"):
            fp8kit.matmul(a, b, instruction=HOPPER_E4, promote_every=bad)
    with pytest.raises(TypeError, match=r"promote_every must be an int"):
        fp8kit.matmul(a, b, instruction=HOPPER_E4, promote_every=128.0)
    with pytest.raises(ValueError, match=r"promote_every.*'exact'"):
        fp8kit.matmul(a, b, instruction="exact", promote_every=128)
    with pytest.raises(ValueError, match=r"K differs"):
        fp8kit.matmul(a, np.ones((128, 8), E4), instruction=HOPPER_E4)
    with pytest.raises(ValueError, match=r"2-D"):
        fp8kit.matmul(a[0], b, instruction=HOPPER_E4)


def test_errors_dtypes():
    a, b = np.ones((4, 32), E4), np.ones((32, 8), E4)
    with pytest.raises(TypeError, match=r"\ba has dtype float32.*e4m3.*float8_e4m3fn"):
        fp8kit.matmul(a.astype(np.float32), b, instruction=HOPPER_E4)
    with pytest.raises(TypeError, match=r"\bb has dtype float8_e5m2.*float8_e4m3fn"):
        fp8kit.matmul(a, b.astype(np.float32).astype(E5), instruction=HOPPER_E4)
    with pytest.raises(TypeError, match=r"\ba has dtype int32"):
        fp8kit.matmul(np.ones((4, 32), np.int32), np.ones((32, 8)), instruction="exact")
    with pytest.raises(TypeError, match=r"C has dtype float16.*float32"):
        fp8kit.matmul(a, b, np.zeros((4, 8), np.float16), instruction=HOPPER_E4)
    with pytest.raises(ValueError, match=r"C has shape \(4, 9\)"):
        fp8kit.matmul(a, b, np.zeros((4, 9), np.float32), instruction=HOPPER_E4)
    with pytest.raises(ValueError, match=r"c must be float32 of shape"):
        fp8kit.matmul(a, b, np.zeros((4, 8), np.float16), instruction="fp32")


def test_errors_names():
    a, b = np.ones((4, 32), E4), np.ones((32, 8), E4)
    with pytest.raises(ValueError, match=r"'fp16' is not an accumulator.*exact, fp32, fp32-pair"):
        fp8kit.matmul(a, b, instruction="fp16")
    with pytest.raises(TypeError, match=r"instruction must be"):
        fp8kit.matmul(a, b, instruction=3)
    with pytest.raises(ValueError, match=r"Hopper has no wgmma 'm64n8k32.f32.e4m3'"):
        fp8kit.matmul(a, b, instruction=("Hopper", "wgmma", "m64n8k32.f32.e4m3"))
    with pytest.raises(ValueError, match=r"out_dtype float64.*allowed: float32, float16, bfloat16"):
        fp8kit.matmul(a, b, instruction=HOPPER_E4, out_dtype=np.float64)
    with pytest.raises(ValueError, match=r"out_dtype int32.*allowed"):
        fp8kit.matmul(a, b, instruction="exact", out_dtype=np.int32)
    with pytest.raises(ValueError, match=r"out_dtype float8_e4m3fn.*allowed"):
        fp8kit.matmul(a, b, instruction=HOPPER_E4, out_dtype=E4)


def test_errors_scales():
    a, b = np.ones((4, 64), E4), np.ones((64, 8), E4)
    # block-scaled: scales required, of their type and shape
    sa, sb = np.ones((4, 2), E8M0), np.ones((2, 8), E8M0)
    with pytest.raises(ValueError, match=r"scale_a is required.*\(4, 2\)"):
        fp8kit.matmul(a, b, instruction=RTXB_MX, scale_b=sb)
    with pytest.raises(ValueError, match=r"scale_b has shape \(2, 9\); expected \(2, 8\)"):
        fp8kit.matmul(a, b, instruction=RTXB_MX, scale_a=sa, scale_b=np.ones((2, 9), E8M0))
    with pytest.raises(TypeError, match=r"scale_a has dtype float32.*ue8m0"):
        fp8kit.matmul(a, b, instruction=RTXB_MX, scale_a=sa.astype(np.float32), scale_b=sb)
    # per-group scales: G = K / promote_every
    with pytest.raises(ValueError, match=r"scale_a has shape \(4, 3\).*\(4, 2\) and \(2, 8\)"):
        fp8kit.matmul(a, b, instruction=HOPPER_E4, promote_every=32,
                      scale_a=np.ones((4, 3), np.float32))  # fmt: skip
    with pytest.raises(ValueError, match=r"scale_b has shape \(8, 2\)"):
        fp8kit.matmul(a, b, instruction=HOPPER_E4, promote_every=32,
                      scale_b=np.ones((8, 2), np.float32))  # fmt: skip
    with pytest.raises(TypeError, match=r"scale_b must be a float32"):
        fp8kit.matmul(a, b, instruction=HOPPER_E4, promote_every=32, scale_b=np.ones(1, np.int8))
    with pytest.raises(ValueError, match=r"scale_a holds values that are not float32"):
        fp8kit.matmul(a, b, instruction=HOPPER_E4, promote_every=32, scale_a=np.float64(0.1))
    # epilogue scales: scalars, M x 1 and 1 x N
    with pytest.raises(ValueError, match=r"scale_a has shape \(4, 8\).*M x 1"):
        fp8kit.matmul(a, b, instruction=HOPPER_E4, scale_a=np.ones((4, 8), np.float32))
    with pytest.raises(ValueError, match=r"scale_b has shape \(4,\).*1 x N"):
        fp8kit.matmul(a, b, instruction=HOPPER_E4, scale_b=np.ones(4, np.float32))
