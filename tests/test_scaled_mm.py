"""fp8kit.scaled_mm against mmaemu's model of ``torch._scaled_mm``, bit for bit.

mmaemu (0.1.0) is the oracle: its ``hopper`` profile is an H100 PCIe and its ``ada``
profile an RTX 4060, both measured through cuBLASLt 12.8.3.14 (fp8kit's hardware
``"h100-pcie"`` and ``"rtx4060"``).  Every call is made on both with the same operands,
scales and split layout, and the results must have the same bits: both GPUs, fast and slow
accumulation, every fp8 operand pair torch accepts, every output type, scales that are not
powers of two, tiny ones (alpha underflows) and huge ones (alpha overflows, fp8 outputs
saturate), K not a multiple of the instruction's or of the slow chunk, split layouts the
tables of mmaemu pick (``mmaemu.explain(...).split``, passed to fp8kit explicitly) and
others given explicitly to both, data with wide exponent spreads, subnormals, exact
cancellation of large terms, all-zero rows, NaN and Inf codes.  The errors fp8kit raises
are those mmaemu (torch, cuBLASLt) raises for the same call.
"""

from __future__ import annotations

import warnings
import zlib

import ml_dtypes
import numpy as np
import pytest

mmaemu = pytest.importorskip("mmaemu")
torch = pytest.importorskip("torch")

import fp8kit  # noqa: E402

E4 = np.dtype(ml_dtypes.float8_e4m3fn)
E5 = np.dtype(ml_dtypes.float8_e5m2)
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
_TORCH = {
    E4: torch.float8_e4m3fn,
    E5: torch.float8_e5m2,
    BF16: torch.bfloat16,
    F16: torch.float16,
    F32: torch.float32,
}
PROFILE = {"h100-pcie": "hopper", "rtx4060": "ada"}
HARDWARE = tuple(PROFILE)
PAIRS = ((E4, E4), (E4, E5), (E5, E4))
OUTS = (F32, BF16, F16, E4, E5)
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}
_ITYPE = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def _name(dt) -> str:
    return np.dtype(dt).name.replace("float8_", "")


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# -- numpy <-> torch -------------------------------------------------------------------------------
def to_torch(x: np.ndarray):
    x = np.ascontiguousarray(x)
    ints = {1: np.uint8, 2: np.int16, 4: np.int32}[x.itemsize]
    return torch.from_numpy(x.view(ints).copy()).view(_TORCH[x.dtype])


def bits_of(t) -> np.ndarray:
    """A torch result's bits as an unsigned numpy array."""
    size = t.element_size()
    return t.contiguous().view(_ITYPE[size]).numpy().view(_UINT[size])


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(_UINT[x.dtype.itemsize])


def _scalar(v):
    return torch.tensor(np.float32(v), dtype=torch.float32)


def oracle(a, b, sa, sb, *, out_dtype, fast, hardware, splitk, scale_result=None):
    """mmaemu.scaled_mm on the same operands: a (M, K) row-major, b given to torch as the
    transpose of a row-major (N, K), i.e. column-major, as torch's mat2 of a GEMM is."""
    ta = to_torch(a)
    tb = to_torch(np.ascontiguousarray(b.T)).t()
    sr = None if scale_result is None else _scalar(scale_result)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = mmaemu.scaled_mm(
            ta, tb, _scalar(sa), _scalar(sb), scale_result=sr,
            out_dtype=None if out_dtype is None else _TORCH[np.dtype(out_dtype)],
            use_fast_accum=fast, profile=PROFILE[hardware], splitk=splitk,
        )  # fmt: skip
    return y


def table_split(a, b, *, out_dtype, fast, hardware, allow_unknown=False):
    """The (S, scheme) mmaemu's split-K tables say the GPU used, as fp8kit's ``splitk``
    (None where they do not know and ``allow_unknown``)."""
    ta = to_torch(a)
    tb = to_torch(np.ascontiguousarray(b.T)).t()
    one = _scalar(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = mmaemu.explain(ta, tb, one, one, out_dtype=_TORCH[np.dtype(out_dtype)],
                              use_fast_accum=fast, profile=PROFILE[hardware])  # fmt: skip
    if plan.validation != "ok":
        if allow_unknown and plan.validation[0] == "SplitKUnknownError":
            return None
        raise AssertionError(plan.validation)
    s = plan.split
    return 1 if s.S == 1 else (s.S, s.scheme)


def check(a, b, sa, sb, *, out_dtype, fast, hardware, splitk=1, scale_result=None, what=""):
    ref = oracle(a, b, sa, sb, out_dtype=out_dtype, fast=fast, hardware=hardware,
                 splitk=splitk, scale_result=scale_result)  # fmt: skip
    sr = None if scale_result is None else np.float32(scale_result)
    got = fp8kit.scaled_mm(a, b, np.float32(sa), np.float32(sb), out_dtype=out_dtype,
                           use_fast_accum=fast, hardware=hardware, splitk=splitk,
                           scale_result=sr)  # fmt: skip
    od = np.dtype(a.dtype if out_dtype is None else out_dtype)
    assert got.dtype == od and got.shape == (a.shape[0], b.shape[1])
    rb, gb = bits_of(ref), bits(got)
    bad = np.argwhere(rb != gb)
    if len(bad):
        i, j = bad[0]
        raise AssertionError(
            f"{what}: {len(bad)} of {rb.size} outputs differ from mmaemu "
            f"(hardware={hardware}, fast={fast}, splitk={splitk}, out={od.name}, "
            f"scales={sa!r}, {sb!r}, scale_result={scale_result!r}); first at {(i, j)}: "
            f"mmaemu {rb[i, j]:#x} ({float(ref.float()[i, j])!r}), fp8kit {gb[i, j]:#x} "
            f"({float(got[i, j].astype(np.float32))!r})"
        )
    return got


# -- operands --------------------------------------------------------------------------------------
def _finite_codes(dt):
    codes = np.arange(256, dtype=np.uint8)
    v = codes.view(dt).astype(np.float64)
    return codes[np.isfinite(v)], v[np.isfinite(v)]


def _cast(v, dt):
    mx = float(ml_dtypes.finfo(dt).max)
    return np.clip(v, -mx, mx).astype(dt)


ROW_MODES = ("codes", "spread", "sub", "zero", "max", "ints", "narrow", "cancel", "flat")


def rows(dt, n, k, rng, modes=ROW_MODES, specials=False) -> np.ndarray:
    """n x k of an fp8 type, each row in one of ``modes`` (cycled from a random start):
    random codes, exponents across the whole range, subnormals, mostly +-0, +-max, small
    integers (exact sums and ties), one binade (long truncations), a +-max pair among small
    values (cancels exactly against a ``flat`` column), one value repeated.  With
    ``specials``, one row holds NaN (and +-Inf for e5m2) codes."""
    dt = np.dtype(dt)
    fi = ml_dtypes.finfo(dt)
    mx, tiny = float(fi.max), float(fi.smallest_normal)
    emin, emax = int(np.log2(float(fi.smallest_subnormal))), int(np.floor(np.log2(mx)))
    codes, _ = _finite_codes(dt)
    out = np.zeros((n, k), dt)
    start = int(rng.integers(len(modes)))
    for r in range(n):
        mode = modes[(start + r) % len(modes)]
        if mode == "codes":
            x = rng.choice(codes, k).view(dt)
        elif mode == "spread":
            e = rng.integers(emin, emax + 1, k).astype(np.float64)
            x = _cast(rng.standard_normal(k) * 2.0**e, dt)
        elif mode == "sub":
            sub = codes[np.abs(codes.view(dt).astype(np.float64)) < tiny]
            x = rng.choice(sub, k).view(dt)
            few = rng.random(k) < 0.2
            x[few] = _cast(rng.standard_normal(k) * 4 * tiny, dt)[few]
        elif mode == "zero":
            x = np.where(rng.random(k) < 0.5, -0.0, 0.0).astype(dt)
            few = rng.random(k) < 0.1
            x[few] = _cast(rng.standard_normal(k), dt)[few]
        elif mode == "max":
            x = _cast(np.where(rng.random(k) < 0.5, -mx, mx), dt)
            few = rng.random(k) < 0.5
            x[few] = _cast(rng.standard_normal(k) * 2.0 ** rng.integers(-8, 2), dt)[few]
        elif mode == "ints":
            x = _cast(rng.integers(-6, 7, k) * 0.5 * 2.0 ** rng.integers(-2, 3), dt)
        elif mode == "narrow":
            e = int(rng.integers(-4, 5))
            x = _cast((1 + rng.random(k)) * np.where(rng.random(k) < 0.5, -1, 1) * 2.0**e, dt)
        elif mode == "cancel":
            x = _cast(rng.standard_normal(k) * 2.0 ** rng.integers(-12, -2), dt)
            i, j = rng.choice(k, 2, replace=False)
            x[i], x[j] = _cast(np.array([mx, -mx]), dt)
        else:  # "flat"
            x = np.full(k, _cast(np.array([rng.choice([1.0, -0.5, 3.0])]), dt)[0], dt)
        out[r] = x
    if specials and n:
        r = int(rng.integers(n))
        vals = [np.nan] + ([np.inf, -np.inf] if dt == E5 else [])
        for i in rng.choice(k, min(k, 2), replace=False):
            out[r, i] = np.array(vals[int(rng.integers(len(vals)))]).astype(dt)
        if dt == E4:  # the negative NaN code as well
            out[r, int(rng.integers(k))] = np.uint8(0xFF).view(dt)
    return out


def operands(fa, fb, m, n, k, rng, specials=True):
    a = rows(fa, m, k, rng, specials=specials)
    b = np.ascontiguousarray(rows(fb, n, k, rng, specials=specials).T)
    return a, b


# scale pairs: ones, not powers of two, negative, zero, tiny (alpha and results underflow),
# huge (alpha overflows to Inf: Inf results, NaN from 0 * Inf), results beyond fp8's range
SCALES = [
    (1.0, 1.0),
    (0.3, 7.1),
    (-0.75, 1.3),
    (2.0**-20, 3e-3),
    (1e-30, 1e-15),
    (1e-22, 3.5e-21),
    (3e38, 4.0),
    (1e19, 2e19),
    (0.0, 5.0),
    (37.5, 91.25),
]
SCALE_RESULTS = [None, 0.37, 1024.0, 2.0**-12, 3.0e5]


# -- the grid --------------------------------------------------------------------------------------
@pytest.mark.parametrize("out_dtype", OUTS, ids=_name)
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{_name(p[0])}x{_name(p[1])}")
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "slow"])
@pytest.mark.parametrize("hardware", HARDWARE)
def test_matches_mmaemu(hardware, fast, pair, out_dtype):
    """Unsplit calls, M not a multiple of any tile, K = 272 (a multiple of 16, not of 32 or
    128: the instruction's last step and the last slow chunk are zero padded)."""
    fa, fb = pair
    if fa == fb == E4 and out_dtype == E5:  # refused by both GPUs (more in test_errors)
        a, b = operands(fa, fb, 21, 32, 272, _rng(hardware, fast))
        with pytest.raises(ValueError, match="out_dtype"):
            fp8kit.scaled_mm(a, b, 1.0, 1.0, out_dtype=out_dtype, use_fast_accum=fast,
                             hardware=hardware)  # fmt: skip
        return
    key = (hardware, fast, fa.name, fb.name, out_dtype.name)
    rng = _rng(*key)
    a, b = operands(fa, fb, 21, 32, 272, rng)
    i = zlib.crc32(repr(key).encode())
    for s in (0, 1 + i % (len(SCALES) - 1)):
        sr = SCALE_RESULTS[(i // 7 + s) % len(SCALE_RESULTS)] if out_dtype in (E4, E5) else None
        check(a, b, *SCALES[s], out_dtype=out_dtype, fast=fast, hardware=hardware,
              scale_result=sr, what="grid")  # fmt: skip


@pytest.mark.parametrize("out_dtype", OUTS, ids=_name)
def test_epilogue_scales(out_dtype):
    """Every scale pair and scale_result on one product (the epilogue: alpha = RN32(sa *
    sb), RN32(acc * alpha + 0), saturation of fp8 outputs, NaN canonical)."""
    fa, fb = (E4, E5) if out_dtype == E5 else (E4, E4)
    rng = _rng("epilogue", out_dtype.name)
    a, b = operands(fa, fb, 9, 16, 64, rng)
    a[0, :] = b[:, 0] = 0  # a zero row and column: 0 * Inf = NaN, 0 * 0 = +0
    srs = SCALE_RESULTS if out_dtype in (E4, E5) else [None, 2.0]  # (ignored but for fp8)
    hw = HARDWARE[zlib.crc32(out_dtype.name.encode()) % 2]
    for sa, sb in SCALES + [(2.0**-149, 1.0), (-1e-38, 1e-9), (np.float32(1 / 3), 3.0)]:
        for sr in srs:
            check(a, b, sa, sb, out_dtype=out_dtype, fast=True, hardware=hw, scale_result=sr,
                  what="epilogue")  # fmt: skip


@pytest.mark.parametrize("hardware", HARDWARE)
def test_default_out_dtype_and_shapes(hardware):
    """out_dtype defaults to a's dtype; M = 1, K = 16 (a single zero-padded step)."""
    rng = _rng("default", hardware)
    for fa, fb in PAIRS:
        for m, n, k in ((1, 16, 16), (3, 48, 16), (17, 16, 48)):
            a, b = operands(fa, fb, m, n, k, rng, specials=False)
            got = check(a, b, 0.5, 3.0, out_dtype=None, fast=False, hardware=hardware,
                        what="default out")  # fmt: skip
            assert got.dtype == fa


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "slow"])
@pytest.mark.parametrize("hardware", HARDWARE)
def test_specials(hardware, fast):
    """NaN and Inf codes: whatever IEEE gives for the whole dot product (Inf * 0 and Inf -
    Inf are NaN, any NaN code gives NaN), whichever step or split they fall in."""
    rng = _rng("specials", hardware, fast)
    m, n, k = 8, 32, 400
    a = rows(E5, m, k, rng, modes=("narrow", "ints", "codes"))
    b = np.ascontiguousarray(rows(E4, n, k, rng, modes=("narrow", "ints", "flat")).T)
    a[0, 5] = np.inf  # row 0: +Inf times b[5, :]
    b[5, 0], b[5, 1], b[5, 2] = 0.0, -2.0, 3.0  # -> NaN, -Inf, +Inf
    a[1, 300] = -np.inf  # row 1: -Inf and +Inf at k = 10, 300 (other chunks and splits)
    a[1, 10] = np.inf
    b[10, 3], b[300, 3] = 1.0, 1.0  # -> Inf - Inf = NaN in column 3
    b[10, 4], b[300, 4] = 1.0, -1.0  # -> +Inf + Inf = +Inf in column 4
    b[10, 5], b[300, 5] = 0.0, 1.0  # -> NaN
    a[2, 399] = np.nan  # the last element of K
    b[0, 6] = np.uint8(0x7F).view(E4)  # e4m3 NaN, column 6
    b[397, 7] = np.uint8(0xFF).view(E4)
    a[3, :] = -0.0  # an all-zero row against the NaN columns
    for splitk in [1, *(((2, "contiguous"), (3, "contiguous")) if hardware == "h100-pcie" else
                        ((2, "serial"), (3, "pairwise"), (5, "pairwise")))]:  # fmt: skip
        for out_dtype in (F32, BF16, E4):
            check(a, b, 1.5, 0.25, out_dtype=out_dtype, fast=fast, hardware=hardware,
                  splitk=splitk, what="specials")  # fmt: skip
    # e5m2 B: Inf codes in B's columns too
    b2 = np.ascontiguousarray(rows(E5, n, k, rng, modes=("narrow", "spread"), specials=True).T)
    a2 = rows(E4, m, k, rng, specials=True)
    b2[7, 9], b2[8, 9] = np.inf, -np.inf
    check(a2, b2, 2.0, 0.125, out_dtype=F16, fast=fast, hardware=hardware, what="e5m2 b")


@pytest.mark.parametrize("hardware", HARDWARE)
def test_zero_size(hardware):
    """K = 0 gives +0 for every scale (torch returns before cuBLAS); M = 0 an empty result."""
    for m, n, k in ((5, 16, 0), (0, 16, 32)):
        a = np.zeros((m, k), E4)
        b = np.zeros((k, n), E4)
        for od in OUTS:
            for sa, sb in ((1.0, 1.0), (3e38, 3e38), (0.0, 1.0)):
                check(a, b, sa, sb, out_dtype=od, fast=False, hardware=hardware, what="zero size")


# -- split-K ---------------------------------------------------------------------------------------
#: (hardware, M, N, K, fmt_a, fmt_b, out, fast, S): shapes whose split mmaemu's tables
#: record (S = 1: recorded unsplit).  Ragged K (K % 64 or K % 128 != 0), splits owning only
#: padding, both reductions of the RTX 4060 (customOption 0/2: serial, 1: pairwise).
TABLE_SHAPES = [
    ("h100-pcie", 64, 64, 1024, E4, E4, F32, True, 1),
    ("h100-pcie", 64, 64, 1024, E5, E4, E4, False, 1),
    ("h100-pcie", 16, 64, 5760, E4, E4, F32, True, 2),
    ("h100-pcie", 16, 64, 5760, E4, E5, F16, False, 2),
    ("h100-pcie", 16, 64, 8192, E5, E4, BF16, False, 3),
    ("rtx4060", 64, 64, 1024, E4, E5, BF16, False, 1),
    ("rtx4060", 32, 48, 96, E4, E4, F32, True, 1),
    ("rtx4060", 16, 16, 160, E4, E4, F32, False, 3),
    ("rtx4060", 16, 16, 64, E4, E5, F32, False, 3),
    ("rtx4060", 1, 16, 128, E5, E4, F32, False, 3),
    ("rtx4060", 224, 176, 16, E4, E5, BF16, True, 2),
    ("rtx4060", 32, 48, 1856, E4, E4, F32, True, 3),
    ("rtx4060", 64, 16, 2064, E4, E4, BF16, True, 3),
    ("rtx4060", 16, 64, 5760, E4, E4, F32, False, 8),
    ("rtx4060", 16, 16, 8192, E4, E4, F32, False, 14),
]


def _shape_id(t):
    hw, m, n, k, fa, fb, od, fast, s = t
    return f"{hw}-{m}x{n}x{k}-{_name(fa)}x{_name(fb)}-{_name(od)}-{'fast' if fast else 'slow'}-S{s}"


@pytest.mark.parametrize("shape", TABLE_SHAPES, ids=_shape_id)
def test_table_split(shape):
    """The split mmaemu's table picks, given to fp8kit explicitly; mmaemu resolves it itself
    (splitk="auto")."""
    hw, m, n, k, fa, fb, od, fast, s = shape
    rng = _rng("table", _shape_id(shape))
    a, b = operands(fa, fb, m, n, k, rng, specials=m > 8)
    splitk = table_split(a, b, out_dtype=od, fast=fast, hardware=hw)
    assert (splitk if splitk == 1 else splitk[0]) == s, splitk
    ref = oracle(a, b, 0.7, 1.9, out_dtype=od, fast=fast, hardware=hw, splitk="auto")
    got = fp8kit.scaled_mm(a, b, np.float32(0.7), np.float32(1.9), out_dtype=od,
                           use_fast_accum=fast, hardware=hw, splitk=splitk)  # fmt: skip
    np.testing.assert_array_equal(bits(got), bits_of(ref))


#: explicit layouts on shapes the tables do not hold: S beyond the k-tiles (empty splits),
#: ragged last tiles, S = 2..7
EXPLICIT = [
    ("h100-pcie", 272, (2, "contiguous")),
    ("h100-pcie", 400, (3, "contiguous")),
    ("h100-pcie", 144, (3, "contiguous")),  # two 128-wide tiles, three splits: one empty
    ("h100-pcie", 1040, (4, "contiguous")),
    ("h100-pcie", 48, (2, "contiguous")),
    ("rtx4060", 272, (2, "serial")),
    ("rtx4060", 272, (3, "pairwise")),
    ("rtx4060", 400, (4, "pairwise")),
    ("rtx4060", 400, (5, "serial")),
    ("rtx4060", 656, (7, "pairwise")),
    ("rtx4060", 48, (3, "pairwise")),  # one tile, three splits
    ("rtx4060", 720, (6, "pairwise")),
]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "slow"])
@pytest.mark.parametrize("case", EXPLICIT, ids=lambda c: f"{c[0]}-K{c[1]}-{c[2][0]}{c[2][1]}")
def test_explicit_split(case, fast):
    hw, k, splitk = case
    rng = _rng("explicit", case, fast)
    fa, fb = PAIRS[int(rng.integers(3))]
    a, b = operands(fa, fb, 11, 32, k, rng)
    od = OUTS[int(rng.integers(4))]
    check(a, b, 1.25, 0.375, out_dtype=od, fast=fast, hardware=hw, splitk=splitk,
          what="explicit split")  # fmt: skip
    check(a, b, 1.0, 1.0, out_dtype=F32, fast=fast, hardware=hw, splitk=(1, "none"),
          what="(1, scheme)")  # fmt: skip


# -- errors ----------------------------------------------------------------------------------------
def _refused_by_oracle(a, b, sa=1.0, sb=1.0, *, out_dtype=F32, hardware="h100-pcie",
                       splitk=1, fast=False):  # fmt: skip
    """The exception mmaemu raises for the call (None if it runs)."""
    ta = to_torch(a)
    tb = to_torch(np.ascontiguousarray(b.T)).t()
    sat = torch.as_tensor(np.asarray(sa, np.float32))
    sbt = torch.as_tensor(np.asarray(sb, np.float32))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mmaemu.scaled_mm(ta, tb, sat, sbt, out_dtype=_TORCH[np.dtype(out_dtype)],
                             use_fast_accum=fast, profile=PROFILE.get(hardware, hardware),
                             splitk=splitk)  # fmt: skip
    except Exception as e:  # noqa: BLE001
        return e
    return None


ERRORS = [
    # (id, fmt_a, fmt_b, M, N, K, kwargs, exception, message pattern)
    ("K%16", E4, E4, 4, 16, 40, {}, ValueError, r"K=40"),
    ("N%16", E4, E4, 4, 24, 32, {}, ValueError, r"N=24"),
    ("e5m2xe5m2", E5, E5, 4, 16, 32, {}, ValueError, r"\ba\b.*\bb\b.*float8_e5m2"),
    ("e4m3xe4m3->e5m2", E4, E4, 4, 16, 32, {"out_dtype": E5}, ValueError, r"out_dtype"),
    (
        "rowwise",
        E4,
        E4,
        4,
        16,
        32,
        {"sa": np.ones((4, 1)), "sb": np.ones((1, 16))},
        ValueError,
        r"scale_a",
    ),
    (
        "hopper-serial",
        E4,
        E4,
        4,
        16,
        32,
        {"splitk": (2, "serial")},
        ValueError,
        r"splitk.*contiguous",
    ),
    (
        "ada-contiguous",
        E4,
        E4,
        4,
        16,
        32,
        {"splitk": (2, "contiguous"), "hardware": "rtx4060"},
        ValueError,
        r"splitk.*serial",
    ),
    ("S-without-scheme", E4, E4, 4, 16, 32, {"splitk": 2}, ValueError, r"splitk"),
]


@pytest.mark.parametrize("case", ERRORS, ids=lambda c: c[0])
def test_errors(case):
    name, fa, fb, m, n, k, kw, exc, pattern = case
    a = np.ones((m, k), fa)
    b = np.ones((k, n), fb)
    kw = dict(kw)
    sa, sb = kw.pop("sa", 1.0), kw.pop("sb", 1.0)
    ref = _refused_by_oracle(a, b, sa, sb, **kw)
    assert ref is not None, f"mmaemu runs {name}"
    od = kw.pop("out_dtype", F32)
    hw = kw.pop("hardware", "h100-pcie")
    with pytest.raises(exc, match=pattern):
        fp8kit.scaled_mm(a, b, sa, sb, out_dtype=od, hardware=hw, **kw)


def test_errors_types():
    a = np.ones((4, 32), E4)
    b = np.ones((32, 16), E4)
    with pytest.raises(TypeError, match=r"\ba has dtype float32"):
        fp8kit.scaled_mm(a.astype(np.float32), b, 1.0, 1.0)
    with pytest.raises(TypeError, match=r"\bb has dtype bfloat16"):
        fp8kit.scaled_mm(a, b.astype(BF16), 1.0, 1.0)
    with pytest.raises(TypeError, match=r"\bb has dtype float8_e4m3fnuz"):
        fp8kit.scaled_mm(a, b.astype(np.float32).astype(ml_dtypes.float8_e4m3fnuz), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"unknown hardware 'h200'.*h100-pcie.*rtx4060"):
        fp8kit.scaled_mm(a, b, 1.0, 1.0, hardware="h200")
    with pytest.raises(ValueError, match=r"out_dtype float64.*allowed"):
        fp8kit.scaled_mm(a, b, 1.0, 1.0, out_dtype=np.float64)
    with pytest.raises(TypeError, match=r"use_fast_accum"):
        fp8kit.scaled_mm(a, b, 1.0, 1.0, use_fast_accum=1)
    with pytest.raises(TypeError, match=r"scale_a"):
        fp8kit.scaled_mm(a, b, np.int32(1), 1.0)
    with pytest.raises(ValueError, match=r"\ba\b.*\bb\b"):
        fp8kit.scaled_mm(a, np.ones((48, 16), E4), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"bias"):
        fp8kit.scaled_mm(a, b, 1.0, 1.0, out_dtype=np.float32, bias=np.zeros(16, np.float32))
    # mmaemu refuses a float32 operand and float64 scales the same way
    assert _refused_by_oracle(a, b, out_dtype=F32) is None
    with pytest.raises(Exception, match=r"Float8"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mmaemu.scaled_mm(torch.ones(4, 32), to_torch(b.T.copy()).t(), _scalar(1), _scalar(1))


# -- bigger sweeps ---------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("hardware", HARDWARE)
def test_random_sweep(hardware, seed):
    """Random shapes, formats, outputs, scales and explicit layouts."""
    rng = _rng("sweep", hardware, seed)
    for _ in range(8):
        m = int(rng.integers(1, 80))
        n = 16 * int(rng.integers(1, 6))
        k = 16 * int(rng.integers(1, 120))
        fa, fb = PAIRS[int(rng.integers(3))]
        od = OUTS[int(rng.integers(5))]
        if fa == fb == E4 and od == E5:
            od = E4
        fast = bool(rng.integers(2))
        s = int(rng.integers(1, 9))
        if s == 1:
            splitk = 1
        elif hardware == "h100-pcie":
            splitk = (s, "contiguous")
        else:
            splitk = (s, ("serial", "pairwise")[int(rng.integers(2))])
        a, b = operands(fa, fb, m, n, k, rng, specials=bool(rng.integers(2)))
        sa, sb = SCALES[int(rng.integers(len(SCALES)))]
        sr = SCALE_RESULTS[int(rng.integers(len(SCALE_RESULTS)))]
        check(a, b, sa, sb, out_dtype=od, fast=fast, hardware=hardware, splitk=splitk,
              scale_result=sr, what="sweep")  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("hardware", HARDWARE)
def test_table_sweep(hardware):
    """Larger shapes the tables record as split, every operand pair and output."""
    shapes = {"h100-pcie": [(16, 64, 12288), (16, 64, 16384)],
              "rtx4060": [(16, 64, 12288), (272, 16, 4096), (64, 272, 3088)]}[hardware]  # fmt: skip
    splits = 0
    for m, n, k in shapes:
        for fast in (True, False):
            for fa, fb in PAIRS:
                for od in OUTS:
                    if fa == fb == E4 and od == E5:
                        continue
                    rng = _rng("tsweep", hardware, m, n, k, fast, fa.name, fb.name, od.name)
                    a, b = operands(fa, fb, m, n, k, rng)
                    splitk = table_split(a, b, out_dtype=od, fast=fast, hardware=hardware,
                                         allow_unknown=True)  # fmt: skip
                    if splitk is None:
                        continue
                    splits += splitk != 1
                    check(a, b, 0.625, 3.0, out_dtype=od, fast=fast, hardware=hardware,
                          splitk=splitk, what="table sweep")  # fmt: skip
    assert splits >= 20


@pytest.mark.parametrize("hardware", HARDWARE)
@pytest.mark.parametrize(
    "shape", [(32, 64, 4096), (64, 512, 2048)], ids=["32x64x4096", "64x512x2048"]
)
def test_splitk_auto_follows_mmaemus_tables(hardware, shape):
    """splitk='auto' takes the split from mmaemu's measured tables: the result equals
    mmaemu's default call (which resolves the split itself) bit for bit (the RTX 4060 splits
    32 x 64 x 4096 in 3, the H100 neither shape)."""
    m, n, k = shape
    rng = _rng(hardware, *shape)
    a, b = operands(E4, E4, m, n, k, rng)
    for fast in (True, False):
        got = fp8kit.scaled_mm(a, b, 1.0, 1.0, out_dtype=F32, use_fast_accum=fast,
                               hardware=hardware, splitk="auto")  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = mmaemu.scaled_mm(
                to_torch(a), to_torch(np.ascontiguousarray(b.T)).t(), torch.tensor(1.0),
                torch.tensor(1.0),
                out_dtype=torch.float32, use_fast_accum=fast, profile=PROFILE[hardware],
            )  # fmt: skip
        assert np.array_equal(got.view(np.uint32), want.numpy().view(np.uint32))


def test_splitk_auto_without_mmaemu(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "mmaemu", None)
    a = np.ones((16, 32), E4)
    with pytest.raises(ValueError, match="splitk='auto'.*mmaemu"):
        fp8kit.scaled_mm(a, a.T.copy(), 1.0, 1.0, splitk="auto")
