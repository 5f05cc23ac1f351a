import os
import sys
import zlib

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import fp8kit
from fp8kit import get_format

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=200
)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
BUILTIN = [*FLOAT8, "bfloat16", "float16"]
INPUT_DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
OUTPUT_DTYPES = INPUT_DTYPES

# User formats covering every special-value convention, sub-byte and 9..16-bit layouts, and
# exponent ranges that do not fit float32 (exercising the float64 and generic paths).
USER_FORMATS = [
    fp8kit.FloatFormat(name="u_e3m4", exponent_bits=3, mantissa_bits=4, bias=3, specials="ieee"),
    fp8kit.FloatFormat(name="u_e2m1fn", exponent_bits=2, mantissa_bits=1, bias=1, specials="fn"),
    fp8kit.FloatFormat(name="u_e3m2fn", exponent_bits=3, mantissa_bits=2, bias=3, specials="fn"),
    fp8kit.FloatFormat(
        name="u_e4m3b11fnuz", exponent_bits=4, mantissa_bits=3, bias=11, specials="fnuz"
    ),
    fp8kit.FloatFormat(name="u_e6m1", exponent_bits=6, mantissa_bits=1, bias=31, specials="ieee"),
    fp8kit.FloatFormat(name="u_e5m6fn", exponent_bits=5, mantissa_bits=6, bias=15, specials="fn"),
    fp8kit.FloatFormat(name="u_e7m8", exponent_bits=7, mantissa_bits=8, bias=63, specials="ieee"),
    fp8kit.FloatFormat(name="u_e8m7b126", exponent_bits=8, mantissa_bits=7, bias=126),
    fp8kit.FloatFormat(
        name="u_e9m6fnuz", exponent_bits=9, mantissa_bits=6, bias=256, specials="fnuz"
    ),
    fp8kit.FloatFormat(name="u_e11m4", exponent_bits=11, mantissa_bits=4, bias=1023),
    fp8kit.FloatFormat(name="u_e10m2b520", exponent_bits=10, mantissa_bits=2, bias=520),
    # smallest normal 2**-1019: float64 subnormals can round to its subnormals, so the
    # integer-only ("generic") kernel is used.
    fp8kit.FloatFormat(name="u_e10m4b1020", exponent_bits=10, mantissa_bits=4, bias=1020),
    fp8kit.FloatFormat(name="u_e1m6fn", exponent_bits=1, mantissa_bits=6, bias=0, specials="fn"),
]


#: Every registered format and the user formats above (the native kernels' tests).
ALL_FORMATS = [get_format(n) for n in fp8kit.formats.registered_formats()] + USER_FORMATS
#: The four input dtypes in the order the native kernels' tests name them.
FLOAT_DTYPES = [np.dtype(t) for t in (np.float32, np.float64, ml_dtypes.bfloat16, np.float16)]
#: Warnings of numpy's own casts in those tests: boundary values overflow float32, and
#: float32 signalling NaNs widened to float64 (encode's float64 path for the odd P3109
#: precision-1 formats) warn "invalid value".
CAST_WARNINGS = [
    pytest.mark.filterwarnings("ignore:overflow encountered"),
    pytest.mark.filterwarnings("ignore:invalid value encountered in cast"),
]


def ml_dtype(name):
    return np.dtype(getattr(ml_dtypes, name)) if name != "float16" else np.dtype(np.float16)


def bits_of(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


@pytest.fixture(params=FLOAT8)
def float8_name(request):
    return request.param


def peer_encode(x, name, saturate):
    """What ml_dtypes (numpy for float16) gives: astype for saturate=False, and clip-then-
    astype for saturate=True (Inf is not clipped in fnuz formats, whose Cast-21 saturate
    row says Inf -> NaN)."""
    fmt = get_format(name)
    x = np.asarray(x)
    assert x.dtype.itemsize <= 4
    x = x.astype(np.float32)  # exact for float16, bfloat16 and float32 inputs
    if saturate:
        clipped = np.clip(x, np.float32(-fmt.max), np.float32(fmt.max))
        keep_inf = np.isinf(x) & (fmt.specials == "fnuz")
        x = np.where(keep_inf, x, clipped)
    with np.errstate(over="ignore", invalid="ignore"):
        return bits_of(x.astype(ml_dtype(name)))


def canonical_nan(bits, name, like):
    """Peers keep NaN payloads for some 16-bit casts; fp8kit gives the canonical NaN with the
    sign.  Replace peer NaNs by that canonical NaN (a documented difference)."""
    fmt = get_format(name)
    vals = bits.view(ml_dtype(name)).astype(np.float32)
    nan = np.isnan(vals)
    sign = np.signbit(np.asarray(like, dtype=np.float32))
    canon = np.where(sign, fmt.nan_code | fmt.sign_mask, fmt.nan_code).astype(bits.dtype)
    if fmt.specials == "fnuz":
        canon[:] = fmt.nan_code
    return np.where(nan, canon, bits)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI every oracle is installed, so a skipped test means something is missing: fail."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (every oracle must be installed): {report.longrepr}"


@pytest.fixture(autouse=True)
def _kernels_typed_once():
    """No kernel a test compiles is typed twice: fp8kit's kernels are typed without Numba's
    SSA pass, and one whose variable takes two types is typed again with it
    (``native.SSA_RETRIES``, see ``native._retyped``): give each variable one type."""
    from fp8kit._kernels import native

    before = len(native.SSA_RETRIES)
    yield
    assert not native.SSA_RETRIES[before:], "typed again in SSA form (variable: one type)"


@pytest.fixture
def fresh_kernels(monkeypatch):
    """Kernels compiled anew (no disk cache, no shared builds, the kernel caches cleared
    before and after), with the settings a test patches in through the returned
    ``monkeypatch.setattr``; everything is restored afterwards."""
    from fp8kit._kernels import codec as kc
    from fp8kit._kernels.fake import fake_convert_kernel

    caches = (kc.encode_kernel, kc.encode_mode_kernel, kc.lookup_kernel, fake_convert_kernel)

    def clear():
        for c in caches:
            c.cache_clear()

    clear()
    monkeypatch.setattr(kc, "_BUILT", {})
    monkeypatch.setattr(kc, "_JIT", {**kc._JIT, "cache": False})
    yield monkeypatch.setattr
    monkeypatch.undo()
    clear()


def refuse_numba(monkeypatch):
    """Make any use of a Numba kernel (fp8kit._kernels.codec.Kernel.build) fail."""

    from fp8kit._kernels.native import is_native

    build = fp8kit._kernels.codec.Kernel.build

    def refuse(self, parallel=False):
        # (a Numba kernel that counts as native, run as object code from fp8kit's cache
        # without Numba's set-up: fp8kit._kernels.inplace.NumbaNative)
        if is_native(self):
            return build(self, parallel)
        raise AssertionError(f"a Numba kernel was built: {self._key}")

    monkeypatch.setattr(fp8kit._kernels.codec.Kernel, "build", refuse)


def boundary_probes(fmt, dtype=np.float64):
    """Every finite value of ``fmt``, the midpoints between neighbours (and beyond the
    largest), the float64 neighbours of both, halves and quarters (subnormal ties), specials,
    NaN payloads, random bit patterns and random normals over the format's range; both
    signs.  float32: the same in float32 and its own NaN payloads, neighbours and
    subnormals; 16-bit types: every bit pattern."""
    from fp8kit._kernels.tables import code_values

    dtype = np.dtype(dtype)
    if dtype.itemsize == 2:
        return np.arange(1 << 16, dtype=np.uint16).view(dtype)
    vals = np.unique(np.abs(code_values(fmt)))
    vals = vals[np.isfinite(vals)]
    top = vals[-1]
    step = np.ldexp(1.0, int(np.floor(np.log2(top))) - fmt.mantissa_bits)
    grid = np.concatenate([vals, [top + step, top + 2 * step, top * 2, top * 4]])
    mids = grid[:-1] / 2 + grid[1:] / 2
    pts = np.concatenate([grid, mids])
    pts = np.concatenate([pts, np.nextafter(pts, np.inf), np.nextafter(pts, 0), vals / 2,
                          vals / 4, vals * 0.75])  # fmt: skip
    rng = np.random.default_rng(zlib.crc32(fmt.name.encode()))
    nan_bits = [0x7FF0000000000001, 0x7FF8000000000000, 0x7FFFFFFFFFFFFFFF, 0x7FF4000000000000]
    rnd = rng.integers(0, 1 << 64, 3000, dtype=np.uint64).view(np.float64)
    lo, hi = fmt.minexp - fmt.mantissa_bits - 3, min(fmt.maxexp + 2, 1023)
    normal = rng.standard_normal(3000) * np.exp2(rng.uniform(lo, hi, 3000))
    special = [np.inf, 0.0, 5e-324, 2.2250738585072014e-308, sys.float_info.max, 1e300]
    pts = np.concatenate([pts, np.array(nan_bits, np.uint64).view(np.float64), special, rnd,
                          normal])  # fmt: skip
    pts = np.abs(pts[~np.isnan(pts)])
    if pts.size > 40_000:  # 16-bit formats: a deterministic subsample of the sweep
        pts = pts[np.random.default_rng(0).choice(pts.size, 40_000, replace=False)]
    pts = np.concatenate([pts, np.array(nan_bits, np.uint64).view(np.float64), [np.nan]])
    if dtype == np.float32:  # (and float32's own NaN payloads, nearest neighbours, subnormals)
        with np.errstate(over="ignore", invalid="ignore"):
            p32 = pts.astype(np.float32)
        nan32 = np.array([0x7F800001, 0x7FFFFFFF, 0x7FC00000], np.uint32).view(np.float32)
        near = [np.nextafter(p32, np.float32(np.inf)), np.nextafter(p32, np.float32(0))]
        pts = np.concatenate([p32, *near, nan32, np.float32([1e-45, 1.1754942e-38])])
    return np.concatenate([pts, -pts])
