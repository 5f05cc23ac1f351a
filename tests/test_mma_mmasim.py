"""fp8kit.mma against Microsoft's MMA-Sim (``mmasim`` 2.1.1), bit for bit.

MMA-Sim is the oracle: every instruction it lists is run on the same random tiles by both,
and the results must have the same bits (NaN as NaN where the model writes a non-canonical
one: the fma, CDNA2 and CDNA1 models).  The tiles are built to reach the models' edges: wide
exponent spreads, subnormal inputs, zeros of both signs, C = +-0, C cancelling A @ B, C of
large and tiny magnitude, NaN/Inf/max-finite inputs (where the type has them), small
integers (ties of the output rounding), block scales across their whole range (ue8m0
2**-127..2**127 and its NaN code 0xFF, ue4m3 subnormals, zero and NaN, with the ignored sign
bit set), fp6/fp4 operands as ml_dtypes arrays and as MMA-Sim's uint8 codes (with junk in
the bits MMA-Sim ignores; packed pairs for kind::mxf4*).

The default run takes one representative shape per (arch, kind, types) (the smallest n:
n only repeats the same dot products); ``-m slow`` sweeps every listed name.
"""

from __future__ import annotations

import contextlib
import functools
import re
import zlib

import ml_dtypes
import numpy as np
import pytest

mmasim = pytest.importorskip("mmasim")
torch = pytest.importorskip("torch")
from mmasim import amd, nv_ptx  # noqa: E402

from fp8kit import mma  # noqa: E402
from fp8kit.mma import _engine  # noqa: E402

# -- operand types --------------------------------------------------------------------------
_NP = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e2m1": ml_dtypes.float4_e2m1fn,
    "fp8": ml_dtypes.float8_e4m3fnuz,
    "bf8": ml_dtypes.float8_e5m2fnuz,
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "tf32": np.float32,
    "xf32": np.float32,
    "f32": np.float32,
    "f64": np.float64,
    "ue8m0": ml_dtypes.float8_e8m0fnu,
    "ue4m3": ml_dtypes.float8_e4m3fn,
}
NP_TYPES = {k: np.dtype(v) for k, v in _NP.items()}
_TORCH = {
    np.dtype(ml_dtypes.float8_e4m3fn): torch.float8_e4m3fn,
    np.dtype(ml_dtypes.float8_e5m2): torch.float8_e5m2,
    np.dtype(ml_dtypes.float8_e4m3fnuz): torch.float8_e4m3fnuz,
    np.dtype(ml_dtypes.float8_e5m2fnuz): torch.float8_e5m2fnuz,
    np.dtype(ml_dtypes.float8_e8m0fnu): torch.float8_e8m0fnu,
}
#: code width of the fp6/fp4 types, which MMA-Sim takes as uint8 codes
SUB_BYTE = {"e3m2": 6, "e2m3": 6, "e2m1": 4}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

#: models whose NaN results are written as the canonical NaN (0x7FFFFFFF / 0x7FFF), by
#: fp8kit and MMA-Sim alike; the others (fma, CDNA2's ftz adds, CDNA1's exact sum) give
#: whatever NaN IEEE arithmetic gives, so only NaN-ness is compared there
CANONICAL = ("fused", "fused_scaled", "grouped", "two_stage", "pairs")


def to_torch(x: np.ndarray):
    x = np.ascontiguousarray(x)
    if x.dtype in _TORCH:
        return torch.from_numpy(x.view(np.uint8).copy()).view(_TORCH[x.dtype])
    if x.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(x.copy())


def from_torch(t) -> np.ndarray:
    size = t.element_size()
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    return t.contiguous().view(ints).numpy().view(_UINT[size])


def bits(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.view(_UINT[x.dtype.itemsize])


# -- the oracle -------------------------------------------------------------------------------
_MMASIM_CLASS = {
    "mma": nv_ptx.MMA,
    "mma.block_scale": nv_ptx.MMABlockScale,
    "wgmma": nv_ptx.WGMMA,
    "tcgen05.mma": nv_ptx.TCGen05MMA,
    "tcgen05.mma.block_scale": nv_ptx.TCGen05MMABlockScale,
    "mfma": amd.MFMA,
}
_ORACLES: dict = {}


def oracle(arch, kind, name):
    key = (arch, kind, name)
    if key not in _ORACLES:
        _ORACLES[key] = _MMASIM_CLASS[kind](arch, name)
    return _ORACLES[key]


def mmasim_names() -> set:
    """Every (arch, kind, name) MMA-Sim 2.1.1 lists."""
    from mmasim.amd import isa_mfma
    from mmasim.nv_ptx import isa_mma, isa_tcgen05mma, isa_wgmma

    tables = {
        "mma": isa_mma.mma_shape_and_type,
        "mma.block_scale": isa_mma.mma_block_scale_shape_and_type,
        "wgmma": isa_wgmma.wgmma_shape_and_type,
        "tcgen05.mma": isa_tcgen05mma.tcgen05mma_shape_and_type,
        "tcgen05.mma.block_scale": isa_tcgen05mma.tcgen05mma_block_scale_shape_and_type,
        "mfma": isa_mfma.arch_mfma_suffix,
    }
    return {(a, k, n) for k, t in tables.items() for a, names in t.items() for n in names}


# -- which instructions the default run takes ------------------------------------------------
ALL = mma.list_instructions()


def _family(arch, kind, name):
    """(arch, kind, name without m and n): the instructions that compute the same dot
    products (NVIDIA's m and n only repeat them; AMD's suffixes are kept whole, as their
    k and block counts differ)."""
    if kind == "mfma":
        return (arch, kind, name)
    return (arch, kind, re.sub(r"^m\d+n\d+k", "k", name))


def _representatives():
    best: dict = {}
    for arch, kind, name in ALL:
        inst = mma.instruction(arch, kind, name)
        key = _family(arch, kind, name)
        if key not in best or (inst.n, inst.m) < (best[key][1].n, best[key][1].m):
            best[key] = ((arch, kind, name), inst)
    return [v[0] for v in best.values()]


REPRESENTATIVES = _representatives()


def _id(t):
    arch, kind, name = t
    return f"{arch.replace(' ', '')}-{kind}-{name}"


# -- tiles ----------------------------------------------------------------------------------
def _all_codes(t: str) -> tuple[np.ndarray, np.ndarray]:
    """Every code of a type of at most 16 bits and its value."""
    if t in SUB_BYTE:
        codes = np.arange(2 ** SUB_BYTE[t], dtype=np.uint8)
    else:
        size = NP_TYPES[t].itemsize
        codes = np.arange(2 ** (8 * size), dtype=np.uint64).astype(_UINT[size])
    with np.errstate(invalid="ignore"):
        return codes, codes.view(NP_TYPES[t]).astype(np.float64)


_FINITE_CACHE: dict = {}


def _finite(t):
    if t not in _FINITE_CACHE:
        codes, v = _all_codes(t)
        _FINITE_CACHE[t] = (codes[np.isfinite(v)], v[np.isfinite(v)])
    return _FINITE_CACHE[t]


def _info(t):
    """(max, smallest normal, smallest subnormal) of type t."""
    native = t in ("f16", "f32", "f64", "tf32", "xf32")
    fi = np.finfo(NP_TYPES[t]) if native else ml_dtypes.finfo(NP_TYPES[t])
    return float(fi.max), float(fi.smallest_normal), float(fi.smallest_subnormal)


def _cast(v: np.ndarray, t: str) -> np.ndarray:
    """float64 values to the type, clipped to its finite range."""
    mx = _info(t)[0]
    with np.errstate(over="ignore", invalid="ignore"):
        return np.clip(v, -mx, mx).astype(NP_TYPES[t])


def _random_codes(t, n, rng):
    """Random finite codes (every exponent, subnormals and zeros included)."""
    dt = NP_TYPES[t]
    if t in SUB_BYTE or dt.itemsize <= 2:
        codes, _ = _finite(t)
        return rng.choice(codes, n).view(dt)
    u = _UINT[dt.itemsize]
    r = rng.integers(0, np.iinfo(u).max, n, dtype=u, endpoint=True)
    x = r.view(dt)
    bad = ~np.isfinite(x)
    r[bad] ^= u(1) << u(8 * dt.itemsize - 2)  # clear the exponent's top bit
    return r.view(dt)


def _subnormals(t, n, rng):
    dt = NP_TYPES[t]
    _, tiny, _ = _info(t)
    if t in SUB_BYTE or dt.itemsize <= 2:
        codes, v = _finite(t)
        sub = codes[np.abs(v) < tiny]
        return rng.choice(sub, n).view(dt)
    u = _UINT[dt.itemsize]
    mant = 23 if dt.itemsize == 4 else 52
    r = rng.integers(0, 2**mant, n).astype(u) | (
        rng.integers(0, 2, n).astype(u) << u(8 * dt.itemsize - 1)
    )
    return r.view(dt)


def _specials(t):
    """+-max of the type and the non-finite values it has (NaN last where it has one)."""
    mx = _info(t)[0]
    vals = [mx, -mx]
    codes, v = _all_codes(t) if (t in SUB_BYTE or NP_TYPES[t].itemsize <= 2) else (None, None)
    if v is not None:
        vals += list(np.unique(v[~np.isfinite(v)]))  # NaN once, +-Inf where present
        if np.isnan(v).any():
            vals.append(np.nan)
    else:
        vals += [np.inf, -np.inf, np.nan]
    return vals


ROW_MODES = ("codes", "normal", "spread", "sub", "zero", "max", "special", "ints", "narrow")


def operand_rows(t: str, rows: int, k: int, rng, modes=ROW_MODES) -> np.ndarray:
    """rows x k of type t, each row drawn in one of ``modes`` (cycled from a random start)."""
    dt = NP_TYPES[t]
    mx, tiny, sub = _info(t)
    emax = int(np.floor(np.log2(mx)))
    emin = int(np.round(np.log2(sub)))
    enorm = int(np.round(np.log2(tiny)))
    # exponents of "normal" and "narrow" rows: the type's normal range, at most +-30
    lo, hi = max(enorm, -30), max(min(emax - 1, 30), max(enorm, -30))
    out = np.zeros((rows, k), dt)
    start = rng.integers(len(modes))
    for r in range(rows):
        mode = modes[(start + r) % len(modes)]
        if mode == "codes":
            x = _random_codes(t, k, rng)
        elif mode == "normal":
            x = _cast(rng.standard_normal(k) * 2.0 ** rng.integers(lo, hi + 1), t)
        elif mode == "spread":
            x = _cast(
                rng.standard_normal(k) * 2.0 ** rng.integers(emin, emax + 1, k).astype(np.float64),
                t,
            )
        elif mode == "sub":
            x = _subnormals(t, k, rng)
            keep = rng.random(k) < 0.25
            x[keep] = _cast(rng.standard_normal(k) * tiny * 2, t)[keep]
        elif mode == "zero":
            x = np.zeros(k, np.float64)
            if t not in ("fp8", "bf8"):  # (fnuz types have no -0: its code is NaN)
                x = np.where(rng.random(k) < 0.5, -0.0, 0.0)
            x = x.astype(dt)
            few = rng.random(k) < 0.15
            x[few] = _cast(rng.standard_normal(k), t)[few]
        elif mode == "max":
            x = _cast(rng.standard_normal(k) * mx / 4, t)
            pick = rng.random(k) < 0.5
            x[pick] = _cast(np.where(rng.random(k) < 0.5, -mx, mx), t)[pick]
        elif mode == "special":
            x = _cast(rng.standard_normal(k), t)
            vals = _specials(t)
            for i in rng.choice(k, min(k, 2), replace=False):
                x[i] = np.array(vals[rng.integers(len(vals))]).astype(dt)
        elif mode == "ints":  # small integers and halves: exact sums, ties of the rounding
            x = _cast(rng.integers(-6, 7, k) * 0.5 * 2.0 ** rng.integers(-2, 3), t)
        else:  # "narrow": one exponent, random significands (carries, long truncations)
            e = rng.integers(lo, hi + 1)
            x = _cast((1 + rng.random(k)) * np.where(rng.random(k) < 0.5, -1, 1) * 2.0**e, t)
        out[r] = x
    return out


C_MODES = ("normal", "zero", "negzero", "cancel", "cancel_eps", "big", "tiny", "codes",
           "offset", "special")  # fmt: skip


def c_tile(t: str, ref: np.ndarray, rng, special=0.05) -> np.ndarray:
    """C of type t: per entry one of C_MODES (specials rare), ``ref`` the float64 A @ B."""
    dt = NP_TYPES[t]
    mx, tiny, sub = _info(t)
    shape = ref.shape
    fin = np.where(np.isfinite(ref), ref, 1.0)
    fin = np.where(fin == 0, 1.0, fin)
    p = np.full(len(C_MODES), (1 - special) / (len(C_MODES) - 1))
    p[-1] = special
    modes = rng.choice(len(C_MODES), shape, p=p)
    g = rng.standard_normal(shape)
    cand = {
        "normal": fin * g,
        "zero": np.zeros(shape),
        "negzero": np.full(shape, -0.0),
        "cancel": -fin,
        "cancel_eps": -fin * (1 + g * 2.0 ** -rng.integers(8, 30, shape).astype(np.float64)),
        "big": np.where(g < 0, -1, 1) * mx * np.where(rng.random(shape) < 0.5, 1.0, 0.75),
        "tiny": g * sub * 4,
        "offset": fin * np.sign(g) * 2.0 ** rng.integers(-40, 41, shape).astype(np.float64),
        "special": np.array([np.inf, -np.inf, np.nan])[rng.integers(0, 3, shape)],
    }
    c = np.zeros(shape, dt)
    for i, name in enumerate(C_MODES):
        sel = modes == i
        if name == "codes":
            c[sel] = _random_codes(t, int(sel.sum()), rng)
        elif name == "special":
            c[sel] = cand[name][sel].astype(dt)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                c[sel] = _cast(cand[name], t)[sel]
    return c


def scale_tile(t: str, shape, rng) -> np.ndarray:
    """Block scales: mostly near 1, some across the whole range, its extremes and NaN."""
    n = int(np.prod(shape))
    mode = rng.choice(5, n, p=[0.35, 0.3, 0.2, 0.1, 0.05])
    if t == "ue8m0":  # code 127 is 1.0; 0 is 2**-127, 254 2**127, 255 NaN
        cand = [
            np.full(n, 127), 127 + rng.integers(-8, 9, n), rng.integers(0, 255, n),
            np.array([0, 254, 1, 253])[rng.integers(0, 4, n)], np.full(n, 255),
        ]  # fmt: skip
        codes = np.choose(mode, cand).astype(np.uint8)
    else:  # ue4m3 as e4m3 codes: 0x38 is 1.0; 1..7 subnormal, 0 zero, 0x7E max, 0x7F NaN
        cand = [
            np.full(n, 0x38), 0x38 + rng.integers(-12, 13, n), rng.integers(0, 0x7F, n),
            np.array([1, 2, 7, 0, 0x7E, 0x08])[rng.integers(0, 6, n)], np.full(n, 0x7F),
        ]  # fmt: skip
        codes = np.choose(mode, cand).astype(np.uint8)
        codes |= (rng.random(n) < 0.3).astype(np.uint8) << 7  # the sign both ignore
    return codes.reshape(shape).view(NP_TYPES[t])


def mmasim_codes(x: np.ndarray, t: str, rng, packed=False, axis=-1) -> np.ndarray:
    """fp6/fp4 values as MMA-Sim's uint8: fp6 in bits 5:0, fp4 in bits 5:2 (random junk in
    the other bits, which it ignores), or two fp4 codes a byte along K, the first high."""
    codes = x.view(np.uint8) & np.uint8(2 ** SUB_BYTE[t] - 1)
    if packed:
        c = np.moveaxis(codes, axis, -1)
        p = (c[..., 0::2] << 4) | c[..., 1::2]
        return np.ascontiguousarray(np.moveaxis(p, -1, axis))
    junk = rng.integers(0, 256, codes.shape).astype(np.uint8)
    if t == "e2m1":
        return (codes << 2) | (junk & np.uint8(0xC3))
    return codes | (junk & np.uint8(0xC0))


def _pow2_exponents(t: str) -> np.ndarray:
    """The q with 2**q exactly a value of type t (subnormals included)."""
    wide = {"f32": (-149, 127), "tf32": (-136, 127), "xf32": (-136, 127), "f64": (-1074, 1023)}
    if t in wide:  # (tf32 keeps float32's top 10 fraction bits: subnormals to 2**-136)
        lo, hi = wide[t]
        return np.arange(lo, hi + 1)
    _, v = _finite(t)
    v = v[v > 0]
    if t == "ue4m3":
        v = v[v <= 448]
    q = np.log2(v)
    return np.unique(q[q == np.round(q)].astype(int))


def _esub(t: str) -> int:
    """The exponent MMA-Sim clamps the type's subnormals at (its smallest normal's)."""
    return int(np.round(np.log2(_info(t)[1])))


def _split(q, ea, eb, esa, esb, limit):
    """Powers of two 2**x of A's type and 2**y of B's with x + y == q whose product's
    exponent in MMA-Sim's normalisation (each clamped at its type's smallest normal) is
    below ``limit``, or None."""
    for x in ea:
        y = q - x
        if y in eb and max(x, esa) + max(y, esb) < limit:
            return int(x), int(y)
    return None


@functools.cache
def _scale_sums(t) -> dict:
    """{s: (s1, s2)}: two scales 2**s1, 2**s2 of type t for each product 2**s."""
    es = [int(x) for x in _pow2_exponents(t)]
    return {s1 + s2: (s1, s2) for s1 in reversed(es) for s2 in reversed(es)}


def add_zero_exponent_probes(inst, tile) -> list:
    """Two outputs (r, r) that see the exponent zero terms take (``exp_zero``) and the
    fractional bits F: C = +0, every product zero but two tiny ones, p1 and p2, whose
    exponents lie below exp_zero, so that the zero terms set the alignment.  p1 is the
    output's last unit (toward-zero rounding) or half of it (nearest-even: a tie);
    p2 = -+2**(exp_zero - F) is kept by the alignment and p2 = -+2**(exp_zero - F - 1) is
    not, so a model whose exp_zero or F is off by one gives another result in one of the
    two.  Only where the types can hold such products: elsewhere exp_zero cannot matter."""
    if inst.model not in ("fused", "fused_scaled", "grouped") or min(inst.m, inst.n) < 2:
        return []
    ez, f = inst.exp_zero, inst.frac_bits
    if inst.rounding == "rne_f16":
        q1, sign2 = -25, 1.0  # half of float16's smallest subnormal: a tie
    else:  # float32's smallest subnormal; rz_e8m13 keeps 13 bits below 2**-126
        q1, sign2 = (-149 if inst.rounding == "rz_f32" else -139), -1.0
    ea, eb = set(_pow2_exponents(inst.a_type)), set(_pow2_exponents(inst.b_type))
    esa, esb = _esub(inst.a_type), _esub(inst.b_type)
    grouped = inst.model == "grouped"
    i1 = inst.block if grouped else 1  # (grouped: p2 in the next block, so another group)
    sums = _scale_sums(inst.scale_type) if inst.block else {0: (0, 0)}

    def term(q, sc):
        """(x, y): 2**x * 2**y * 2**sc == 2**q with the term's exponent below exp_zero (a
        group's term takes its scales' exponent)."""
        if grouped:
            return _split(q - sc, ea, eb, esa, esb, 10**6) if sc < ez else None
        return _split(q - sc, ea, eb, esa, esb, ez - sc)

    made = []
    for r, q2 in enumerate((ez - f, ez - f - 1)):
        if not grouped:  # (one scale pair for both products)
            both = ((sc, term(q1, sc), term(q2, sc)) for sc in sums)
            hit = next(((sc, t0, t1) for sc, t0, t1 in both if t0 and t1), None)
            if hit is None:
                continue
            sc0 = sc1 = hit[0]
            (x0, y0), (x1, y1) = hit[1], hit[2]
        else:
            t0 = next(((sc, t) for sc in sums if (t := term(q1, sc))), None)
            t1 = next(((sc, t) for sc in sums if (t := term(q2, sc))), None)
            if t0 is None or t1 is None:
                continue
            (sc0, (x0, y0)), (sc1, (x1, y1)) = t0, t1
        a_row = np.zeros(tile.a.shape[1])
        b_col = np.zeros(tile.b.shape[0])
        a_row[0], b_col[0] = 2.0**x0, 2.0**y0
        a_row[i1], b_col[i1] = sign2 * 2.0**x1, 2.0**y1
        tile.a[r] = a_row.astype(tile.a.dtype)
        tile.b[:, r] = b_col.astype(tile.b.dtype)
        tile.c[r, r] = 0.0
        if inst.block:
            tile.sa[r] = np.array(1.0).astype(tile.sa.dtype)
            tile.sb[:, r] = np.array(1.0).astype(tile.sb.dtype)
            for idx, (u, v) in ((0, sums[sc0]), (i1, sums[sc1])):
                tile.sa[r, idx // inst.block] = np.array(2.0**u).astype(tile.sa.dtype)
                tile.sb[idx // inst.block, r] = np.array(2.0**v).astype(tile.sb.dtype)
        made.append(r)
    return made


class Tile:
    """One random problem for an instruction: fp8kit's arguments and MMA-Sim's."""

    def __init__(self, inst, rng, k=None, special_c=0.05):
        with np.errstate(all="ignore"):  # (float64 tiles overflow on purpose)
            self._build(inst, rng, inst.k if k is None else k, special_c)

    def _build(self, inst, rng, k, special_c):
        self.a = operand_rows(inst.a_type, inst.m, k, rng)
        self.b = np.ascontiguousarray(operand_rows(inst.b_type, inst.n, k, rng).T)
        self.sa = self.sb = None
        a, b = self.a.astype(np.float64), self.b.astype(np.float64)
        if inst.block:
            nb = k // inst.block
            self.sa = scale_tile(inst.scale_type, (inst.m, nb), rng)
            self.sb = scale_tile(inst.scale_type, (nb, inst.n), rng)
            ue = np.uint8(0x7F) if inst.scale_type == "ue4m3" else np.uint8(0xFF)
            a = a * np.repeat((self.sa.view(np.uint8) & ue).view(self.sa.dtype), inst.block, 1)
            b = b * np.repeat((self.sb.view(np.uint8) & ue).view(self.sb.dtype), inst.block, 0)
        ref = a @ b  # (C = -ref cancels the product)
        self.c = c_tile(inst.c_type, ref, rng, special_c)
        self.probes = add_zero_exponent_probes(inst, self)
        self.encode(inst, rng)

    def encode(self, inst, rng):
        """fp6/fp4 operands as MMA-Sim's uint8 codes (again after a change of a or b)."""
        self.a_codes = self.b_codes = None
        if inst.a_type in SUB_BYTE:
            self.a_codes = mmasim_codes(self.a, inst.a_type, rng, inst.packed, axis=1)
        if inst.b_type in SUB_BYTE:
            self.b_codes = mmasim_codes(self.b, inst.b_type, rng, inst.packed, axis=0)

    def mmasim_operands(self):
        a = self.a_codes if self.a_codes is not None else self.a
        b = self.b_codes if self.b_codes is not None else self.b
        return a, b

    def fp8kit_variants(self):
        """(label, A, B): the ml_dtypes arrays; for fp6/fp4 MMA-Sim's uint8 codes, and
        codes for A with arrays for B (each operand is read by its own dtype)."""
        yield "arrays", self.a, self.b
        if self.a_codes is not None or self.b_codes is not None:
            yield "codes", *self.mmasim_operands()
        if self.a_codes is not None and self.b_codes is not None:
            yield "codes and arrays", self.a_codes, self.b


def run_mmasim(arch, kind, name, a, b, c, sa=None, sb=None) -> np.ndarray:
    op = oracle(arch, kind, name)
    args = [to_torch(a), to_torch(b), to_torch(c)]
    if sa is not None:
        args += [to_torch(sa), to_torch(sb)]
    return from_torch(op(*args))


def assert_same(inst, ours: np.ndarray, theirs: np.ndarray, what: str, tile=None):
    """Bits equal; for the non-canonical-NaN models NaN against NaN."""
    mine = bits(ours)
    if inst.model in CANONICAL:
        bad = mine != theirs
    else:
        nan_o = np.isnan(ours)
        nan_t = np.isnan(theirs.view(ours.dtype))
        bad = (nan_o != nan_t) | (~nan_o & (mine != theirs))
    if bad.any():
        idx = np.argwhere(bad)[:6]
        w = 2 * ours.dtype.itemsize
        lines = []
        for i, j in idx:
            line = f"  [{i},{j}] fp8kit {int(mine[i, j]):0{w}x} mmasim {int(theirs[i, j]):0{w}x}"
            if tile is not None:
                line += f" C={tile.c[i, j]!r}"
            lines.append(line)
        raise AssertionError(
            f"{inst.arch} {inst.kind} {inst.shape_and_type} ({what}): {int(bad.sum())} of "
            f"{bad.size} outputs differ\n" + "\n".join(lines)
        )


def _seed(*parts) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


@contextlib.contextmanager
def generic_kernel():
    """fp8kit's scalar (generic) kernel only: the fast kernel's eligibility test says no."""
    saved = _engine._fast_lanes
    _engine._fast_lanes = lambda *args, **kw: None
    try:
        yield
    finally:
        _engine._fast_lanes = saved


def uses_fast_kernel(inst, tile) -> bool:
    prep = _engine.prepare(inst, tile.a, tile.b, tile.c.astype(np.float64))
    return prep.fast is not None


def check_instruction(arch, kind, name, seed=0, tiles=1):
    """MMA-Sim's D against fp8kit's: its default kernel (the fast one where eligible) on
    every operand form, and the generic kernel."""
    inst = mma.instruction(arch, kind, name)
    for t in range(tiles):
        rng = np.random.default_rng(_seed(arch, kind, name, seed, t))
        tile = Tile(inst, rng)
        theirs = run_mmasim(arch, kind, name, *tile.mmasim_operands(), tile.c, tile.sa, tile.sb)
        extra = (tile.sa, tile.sb) if inst.block else ()
        for label, a, b in tile.fp8kit_variants():
            ours = inst(a, b, tile.c, *extra)
            assert ours.dtype == NP_TYPES[inst.d_type]
            assert_same(inst, ours, theirs, f"tile {t}, {label}", tile)
        with generic_kernel():
            ours = inst(tile.a, tile.b, tile.c, *extra)
        assert_same(inst, ours, theirs, f"tile {t}, generic kernel", tile)


def run_mmasim_pairs(arch, kind, name, tile, rows, cols) -> np.ndarray:
    """MMA-Sim's outputs (rows[i], cols[i]) only: its dot-product-add (``dpa``, what its
    ``__call__`` runs on every row of A against every column of B) on those pairs."""
    op = oracle(arch, kind, name)
    a, b = tile.mmasim_operands()
    args = [
        to_torch(a[rows]),
        to_torch(np.ascontiguousarray(b.T[cols])),
        to_torch(tile.c[rows, cols]),
    ]
    if tile.sa is not None:
        args += [to_torch(tile.sa[rows]), to_torch(np.ascontiguousarray(tile.sb.T[cols]))]
    return from_torch(op.dpa(*args))


def check_instruction_sampled(arch, kind, name, seed=0, pairs=192):
    """fp8kit's whole tile against MMA-Sim's on some outputs: the first and last row and
    column, the probes, and random others (MMA-Sim's time grows with m * n, up to 128 x 256)."""
    inst = mma.instruction(arch, kind, name)
    rng = np.random.default_rng(_seed(arch, kind, name, seed))
    tile = Tile(inst, rng)
    m, n = inst.m, inst.n
    rows = np.concatenate([np.zeros(n, int), np.full(n, m - 1), np.arange(m), np.arange(m),
                           np.array(tile.probes, int), rng.integers(0, m, pairs)])  # fmt: skip
    cols = np.concatenate([np.arange(n), np.arange(n), np.zeros(m, int), np.full(m, n - 1),
                           np.array(tile.probes, int), rng.integers(0, n, pairs)])  # fmt: skip
    theirs = run_mmasim_pairs(arch, kind, name, tile, rows, cols)
    for label, a, b in tile.fp8kit_variants():
        ours = inst(a, b, tile.c, tile.sa, tile.sb) if inst.block else inst(a, b, tile.c)
        assert ours.shape == (m, n) and ours.dtype == NP_TYPES[inst.d_type]
        assert_same(inst, ours[rows, cols][None], theirs[None], label)


# -- the tests --------------------------------------------------------------------------------
def test_same_instruction_list():
    assert set(ALL) == mmasim_names()
    assert len(ALL) == len(set(ALL))


_TORCH_OF = {
    "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e3m2": torch.uint8,
    "e2m3": torch.uint8, "e2m1": torch.uint8, "fp8": torch.float8_e4m3fnuz,
    "bf8": torch.float8_e5m2fnuz, "f16": torch.float16, "bf16": torch.bfloat16,
    "tf32": torch.float32, "xf32": torch.float32, "f32": torch.float32, "f64": torch.float64,
    "ue8m0": torch.float8_e8m0fnu, "ue4m3": torch.float8_e4m3fn,
}  # fmt: skip
_RHO = {"RZ-FP32": "rz_f32", "RZ-E8M13": "rz_e8m13", "RNE-FP16": "rne_f16", "RNE-FP32": "rne_f32"}


def mmasim_parameters(op, k) -> dict:
    """MMA-Sim's model of one instruction as fp8kit.mma.Instruction's fields."""
    from mmasim.arithmetic import fdpa, fma, ftz_mul_add

    ar = op.arithmetic_op
    if isinstance(ar, fma.MMA_FMA):
        return {"model": "fma", "products": k}
    if isinstance(ar, ftz_mul_add.MMA_FTZ_MUL_ADD):
        return {"model": "ftz_add", "products": k, "group": ar.P}
    if isinstance(ar, fdpa.MMA_E_FDPA):
        return {"model": "exact_sum", "products": min(k, ar.L_max)}
    p = {"products": min(k, ar.L_max), "frac_bits": ar.F, "rounding": _RHO[ar.rho]}
    if isinstance(ar, (fdpa.MMA_TR_FDPA, fdpa.MMA_GTR_FDPA)):
        model = "two_stage" if isinstance(ar, fdpa.MMA_TR_FDPA) else "pairs"
        return {**p, "model": model, "frac_bits2": ar.F2}
    p["exp_zero"] = ar.e_zero
    if isinstance(ar, fdpa.MMA_GST_FDPA):
        return {**p, "model": "grouped", "group": ar.G}
    return {**p, "model": "fused_scaled" if isinstance(ar, fdpa.MMA_ST_FDPA) else "fused"}


def test_every_instruction_has_mmasim_parameters():
    """Every name's shape, operand types and model parameters, against MMA-Sim's objects
    (no arithmetic: the sampled sweep below runs them all under -m slow)."""
    bad = []
    for arch, kind, name in ALL:
        inst = mma.instruction(arch, kind, name)
        op = oracle(arch, kind, name)
        want = {"m": op.m, "n": op.n, "k": op.k, **mmasim_parameters(op, op.k)}
        types = {t: _TORCH_OF[getattr(inst, f"{t}_type")] for t in "abcd"}
        want_types = {t: getattr(op, f"{t}_type") for t in "abcd"}
        if inst.block:
            types["s"], want_types["s"] = _TORCH_OF[inst.scale_type], op.s_type
            want["block"] = op.block_size
            want["packed"] = op.packing == 2
        want["tf32"] = name.count("tf32") > 0 or name.endswith("xf32")
        got = {key: getattr(inst, key) for key in want}
        if got != want or types != want_types:
            bad.append((arch, kind, name, got, want, types, want_types))
    assert not bad, f"{len(bad)} instructions differ, e.g. {bad[:2]}"


@pytest.mark.parametrize("key", REPRESENTATIVES, ids=_id)
def test_instruction_bits(key):
    check_instruction(*key, tiles=3)


@pytest.mark.slow
@pytest.mark.parametrize("key", ALL, ids=_id)
def test_instruction_bits_all(key):
    check_instruction_sampled(*key, seed=1)


# -- the tiles are sharp enough: each model parameter, changed by one, is caught ------------
MUTATIONS = [
    # (arch, kind, name, change): a wrong parameter the default tiles must tell apart
    ("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3", {"frac_bits": 14}),
    ("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3", {"frac_bits": 12}),
    ("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3", {"rounding": "rz_f32"}),
    ("Hopper", "wgmma", "m64n8k32.f32.e5m2.e4m3", {"products": 16}),
    ("Hopper", "wgmma", "m64n8k32.f16.e5m2.e5m2", {"frac_bits": 12}),
    ("Hopper", "wgmma", "m64n8k32.f16.e4m3.e5m2", {"frac_bits": 14}),
    ("Hopper", "wgmma", "m64n8k8.f32.tf32.tf32", {"tf32": False}),
    ("Hopper", "wgmma", "m64n8k16.f32.bf16.bf16", {"exp_zero": -132}),
    ("Hopper", "wgmma", "m64n8k16.f16.f16.f16", {"exp_zero": -20}),
    ("Ada Lovelace", "mma", "m16n8k32.f32.e4m3.e5m2.f32", {"products": 32}),
    ("Ada Lovelace", "mma", "m16n8k16.f32.e5m2.e5m2.f32", {"rounding": "rne_f32"}),
    ("Ampere", "mma", "m16n8k16.f32.f16.f16.f32", {"frac_bits": 23}),
    ("Ampere", "mma", "m16n8k16.f32.f16.f16.f32", {"frac_bits": 25}),
    ("Ampere", "mma", "m16n8k16.f32.bf16.bf16.f32", {"products": 4}),
    ("Ampere", "mma", "m16n8k8.f32.tf32.tf32.f32", {"exp_zero": -131}),
    ("Volta", "mma", "m8n8k4.f16.f16.f16.f16", {"exp_zero": -20}),
    ("Volta", "mma", "m8n8k4.f32.f16.f16.f32", {"frac_bits": 24}),
    ("RTX Blackwell", "mma", "m16n8k32.kind::f8f6f4.f32.e2m1.e3m2.f32", {"frac_bits": 24}),
    ("Blackwell", "tcgen05.mma", "m64n8k16.kind::f16.f16.f16.f16", {"exp_zero": -22}),
    ("Blackwell", "tcgen05.mma", "m64n8k32.kind::f8f6f4.f16.e2m3.e2m1", {"frac_bits": 3}),
    ("RTX Blackwell", "mma.block_scale", "m16n8k32.kind::mxf8f6f4.block32.f32.e4m3.e2m1.f32.ue8m0",
     {"frac_bits": 24}),
    ("RTX Blackwell", "mma.block_scale", "m16n8k32.kind::mxf8f6f4.block32.f32.e5m2.e3m2.f32.ue8m0",
     {"exp_zero": -132}),
    ("Blackwell", "tcgen05.mma.block_scale", "m128n8k64.kind::mxf4.block32.f32.e2m1.e2m1.ue8m0",
     {"frac_bits": 34}),
    ("Blackwell", "tcgen05.mma.block_scale", "m128n8k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue8m0",
     {"group": 8}),
    ("RTX Blackwell", "mma.block_scale", "m16n8k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.f32.ue8m0",
     {"exp_zero": -138}),
    ("CDNA3", "mfma", "f32_32x32x8_f16", {"frac_bits": 23}),
    ("CDNA3", "mfma", "f32_32x32x8_bf16", {"frac_bits2": 30}),
    ("CDNA3", "mfma", "f32_16x16x8_xf32", {"products": 8}),
    ("CDNA3", "mfma", "f32_16x16x32_fp8_bf8", {"model": "two_stage"}),
    ("CDNA3", "mfma", "f32_16x16x32_bf8_bf8", {"frac_bits2": 32}),
    ("CDNA1", "mfma", "f32_32x32x8f16", {"products": 8}),
    ("CDNA2", "mfma", "f32_32x32x4bf16", {"group": 4}),
    ("CDNA2", "mfma", "f32_32x32x8bf16_1k", {"group": 2}),
]  # fmt: skip


@pytest.mark.parametrize(
    "arch, kind, name, change", MUTATIONS, ids=lambda x: str(x).replace(" ", "")
)
def test_tiles_catch_a_wrong_parameter(arch, kind, name, change):
    """The default tiles are sharp: a model one parameter off does not pass them."""
    inst = mma.instruction(arch, kind, name)
    wrong = inst.replace(**change)
    for t in range(2):
        rng = np.random.default_rng(_seed(arch, kind, name, 0, t))
        tile = Tile(inst, rng)
        theirs = run_mmasim(arch, kind, name, *tile.mmasim_operands(), tile.c, tile.sa, tile.sb)
        args = (tile.a, tile.b, tile.c) + ((tile.sa, tile.sb) if inst.block else ())
        try:
            assert_same(inst, wrong(*args), theirs, "mutated")
        except AssertionError:
            return
    pytest.fail(f"the tiles do not tell {change} from the published model")


# -- K-chains: D fed back as C, step after step, on both sides -------------------------------
def _chain_keys():
    seen, keys = set(), []
    for arch, kind, name in REPRESENTATIVES:
        inst = mma.instruction(arch, kind, name)
        fam = (arch, kind, inst.model, inst.d_type, inst.scale_type, inst.packed,
               inst.frac_bits, inst.rounding, inst.products, _NP[inst.a_type])  # fmt: skip
        if inst.c_type == inst.d_type and fam not in seen:
            seen.add(fam)
            keys.append((arch, kind, name))
    return keys


def _k_slice(x, s, k, axis, packed_codes):
    w = k // 2 if packed_codes else k
    idx = [slice(None)] * 2
    idx[axis] = slice(s * w, (s + 1) * w)
    return np.ascontiguousarray(x[tuple(idx)])


@pytest.mark.parametrize("key", _chain_keys(), ids=_id)
def test_k_chain(key):
    """Three instructions in a row over K, each one's D the next one's C (fp8kit's D into
    fp8kit, MMA-Sim's into MMA-Sim): the same bits after every step."""
    arch, kind, name = key
    inst = mma.instruction(arch, kind, name)
    steps, k = 3, inst.k
    rng = np.random.default_rng(_seed("chain", *key))
    tile = Tile(inst, rng, k=steps * k)
    a_m, b_m = tile.mmasim_operands()
    ours = tile.c
    theirs = to_torch(tile.c)
    op = oracle(arch, kind, name)
    for s in range(steps):
        a = _k_slice(tile.a, s, k, 1, False)
        b = _k_slice(tile.b, s, k, 0, False)
        am = _k_slice(a_m, s, k, 1, inst.packed and tile.a_codes is not None)
        bm = _k_slice(b_m, s, k, 0, inst.packed and tile.b_codes is not None)
        extra, extra_t = (), ()
        if inst.block:
            nb = k // inst.block
            sa, sb = _k_slice(tile.sa, s, nb, 1, False), _k_slice(tile.sb, s, nb, 0, False)
            extra, extra_t = (sa, sb), (to_torch(sa), to_torch(sb))
        ours = inst(a, b, ours, *extra)
        theirs = op(to_torch(am), to_torch(bm), theirs, *extra_t)
        assert_same(inst, ours, from_torch(theirs), f"chain step {s}")


# -- the float32 fast kernel against the generic one (and MMA-Sim) on adversarial tiles ------
FAST = [
    ("Hopper", "wgmma", f"m64n8k32.{d}.{a}.{b}")
    for d in ("f32", "f16") for a in ("e4m3", "e5m2") for b in ("e4m3", "e5m2")
] + [
    ("Hopper", "wgmma", "m64n136k32.f32.e4m3.e5m2"),  # (a pass of 128 lanes and a tail)
    ("Hopper", "wgmma", "m64n256k32.f16.e5m2.e4m3"),
] + [
    ("Ada Lovelace", "mma", f"m16n8k{k}.{d}.{a}.{b}.{d}")
    for k in (32, 16) for d in ("f32", "f16") for a in ("e4m3", "e5m2") for b in ("e4m3", "e5m2")
] + [  # (16-bit and fp6/fp4 operands: float64 lanes)
    ("Hopper", "wgmma", "m64n8k16.f32.bf16.bf16"),
    ("Hopper", "wgmma", "m64n136k16.f16.f16.f16"),
    ("Hopper", "wgmma", "m64n8k8.f32.tf32.tf32"),
    ("Ampere", "mma", "m16n8k16.f32.f16.f16.f32"),
    ("Volta", "mma", "m8n8k4.f16.f16.f16.f16"),
    ("Blackwell", "tcgen05.mma", "m64n8k32.kind::f8f6f4.f32.e2m1.e3m2"),
    ("RTX Blackwell", "mma", "m16n8k32.kind::f8f6f4.f16.e5m2.e2m3.f16"),
]  # fmt: skip


def _adversarial(inst, rng):
    """A tile with NaN/Inf in some rows and columns, non-finite and extreme C, zero rows
    against tiny C (the zero terms' exponent), and rows of the types' max (overflow)."""
    tile = Tile(inst, rng, special_c=0.2)
    a, b, c = tile.a, tile.b, tile.c
    m, n = c.shape
    k = a.shape[1]
    sa, sb = _specials(inst.a_type), _specials(inst.b_type)
    nan_a = np.array(sa[-1] if len(sa) > 2 else sa[1]).astype(a.dtype)  # (NaN, else -max)
    inf_b = np.array(np.inf if np.inf in sb else sb[-1]).astype(b.dtype)  # (Inf, NaN, -max)
    mx_a = np.array(_info(inst.a_type)[0]).astype(a.dtype)
    a[2, rng.integers(k)] = nan_a
    b[rng.integers(k), 3] = inf_b
    b[rng.integers(k), 5] = -inf_b
    a[4] = 0
    c[4] = np.array([0.0, -0.0, 1e-45, -1e-45, 2.0**-126, 6e-8, np.inf, np.nan] * n)[:n].astype(
        c.dtype
    )
    a[5] = mx_a
    c[5] = np.array(_info(inst.c_type)[0]).astype(c.dtype)
    c[6::7, 1] = np.array(np.inf).astype(c.dtype)
    c[7::9, 6] = np.array(-np.inf).astype(c.dtype)
    tile.encode(inst, rng)
    return tile


@pytest.mark.parametrize("key", FAST, ids=_id)
def test_fast_kernel_matches_generic(key):
    arch, kind, name = key
    inst = mma.instruction(arch, kind, name)
    for t in range(3):
        tile = _adversarial(inst, np.random.default_rng(_seed("fast", *key, t)))
        assert uses_fast_kernel(inst, tile), "the fast kernel should serve this one"
        fast = inst(tile.a, tile.b, tile.c)
        with generic_kernel():
            assert not uses_fast_kernel(inst, tile)
            generic = inst(tile.a, tile.b, tile.c)
        theirs = run_mmasim(arch, kind, name, *tile.mmasim_operands(), tile.c)
        np.testing.assert_array_equal(bits(fast), bits(generic), err_msg=f"tile {t}")
        assert_same(inst, fast, theirs, f"adversarial tile {t}, fast kernel", tile)


# -- errors ---------------------------------------------------------------------------------
def test_unknown_names():
    with pytest.raises(ValueError, match=r"unknown arch 'Hopperr'.*Hopper.*CDNA3"):
        mma.instruction("Hopperr", "mma", "m16n8k16.f32.f16.f16.f32")
    with pytest.raises(ValueError, match=r"unknown kind 'wgmma2'.*wgmma.*mfma"):
        mma.instruction("Hopper", "wgmma2", "m64n8k32.f32.e4m3.e4m3")
    with pytest.raises(ValueError, match=r"Ampere has no wgmma.*Hopper"):
        mma.instruction("Ampere", "wgmma", "m64n8k32.f32.e4m3.e4m3")
    with pytest.raises(ValueError, match=r"Hopper has no wgmma 'm64n4k32.*valid: m64n8k8"):
        mma.instruction("Hopper", "wgmma", "m64n4k32.f32.e4m3.e4m3")
    with pytest.raises(ValueError, match=r"Volta has no mma .*valid: m8n8k4"):
        mma.instruction("Volta", "mma", "m16n8k16.f32.f16.f16.f32")
    with pytest.raises(ValueError, match="model"):
        mma.instruction("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3").replace(model="nope")


def test_wrong_operands():
    wg = mma.instruction("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
    a = np.ones((64, 32), ml_dtypes.float8_e4m3fn)
    b = np.ones((32, 8), ml_dtypes.float8_e4m3fn)
    c = np.zeros((64, 8), np.float32)
    assert wg(a, b, c)[0, 0] == 32
    with pytest.raises(TypeError, match=r"(?i)\ba\b has dtype float32.*float8_e4m3fn"):
        wg(a.astype(np.float32), b, c)
    with pytest.raises(TypeError, match=r"(?i)\bb\b has dtype float8_e5m2.*float8_e4m3fn"):
        wg(a, b.astype(ml_dtypes.float8_e5m2), c)
    with pytest.raises(TypeError, match=r"C has dtype float16.*float32"):
        wg(a, b, c.astype(np.float16))
    with pytest.raises(TypeError, match=r"(?i)\ba\b has dtype uint8"):  # (codes: fp6/fp4 only)
        wg(a.view(np.uint8), b, c)
    with pytest.raises(ValueError, match=r"A has shape \(64, 16\).*\(64, 32\)"):
        wg(a[:, :16], b, c)
    with pytest.raises(ValueError, match=r"B has shape"):
        wg(a, b[:, :4], c)
    with pytest.raises(ValueError, match=r"C has shape"):
        wg(a, b, c[:8])
    with pytest.raises(ValueError, match=r"A has shape"):
        wg(a[None], b, c)
    with pytest.raises(ValueError, match="not block-scaled"):
        wg(a, b, c, np.ones((64, 1)), np.ones((1, 8)))


def test_wrong_scales():
    bs = mma.instruction(
        "Blackwell",
        "tcgen05.mma.block_scale",
        "m128n8k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue4m3",
    )
    a = np.ones((128, 64), ml_dtypes.float4_e2m1fn)
    b = np.ones((64, 8), ml_dtypes.float4_e2m1fn)
    c = np.zeros((128, 8), np.float32)
    sa = np.ones((128, 4), ml_dtypes.float8_e4m3fn)
    sb = np.ones((4, 8), ml_dtypes.float8_e4m3fn)
    assert bs(a, b, c, sa, sb)[0, 0] == 64
    packed = np.full((128, 32), 0x22, np.uint8)  # (1.0, 1.0) a byte
    assert bs(packed, np.full((32, 8), 0x22, np.uint8), c, sa, sb)[0, 0] == 64
    with pytest.raises(ValueError, match=r"scale_a is required.*\(128, 4\)"):
        bs(a, b, c)
    with pytest.raises(ValueError, match=r"scale_b is required"):
        bs(a, b, c, sa)
    with pytest.raises(TypeError, match=r"scale_a has dtype float8_e8m0fnu.*float8_e4m3fn"):
        bs(a, b, c, np.ones((128, 4), ml_dtypes.float8_e8m0fnu), sb)
    with pytest.raises(ValueError, match=r"scale_b has shape \(2, 8\); expected \(4, 8\)"):
        bs(a, b, c, sa, sb[:2])
    with pytest.raises(ValueError, match=r"A has shape \(128, 64\).*\(128, 32\)|B has shape"):
        bs(packed[:, :16].repeat(4, 1), b, c, sa, sb)
