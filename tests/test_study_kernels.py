"""The fused study kernel takes a format's constants at run time: every format it serves
gives the figures of quantize + error_metrics, and formats share one compiled function."""

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit import _args, study
from fp8kit._kernels import metrics as km
from fp8kit.formats import registered_formats

SUMS = ("sqnr_db", "rmse", "sum_sq_error", "sum_sq_signal")

# every format the fused pass takes (signed 8-bit formats that round in place), once
FUSED = sorted({f.name for f in registered_formats().values() if _args.rounds_in_place(f)})


def same_metrics(a, b):
    da, db = a.as_dict(), b.as_dict()
    for k in SUMS:
        assert da.pop(k) == pytest.approx(db.pop(k), rel=1e-13), k
    assert da == db


def test_the_fused_formats_are_the_signed_ones_of_8_bits_or_fewer():
    # (fp4 and fp6 too: they took numpy steps, 4-6x float8's time, and NaN became -0)
    assert "float8_e4m3fn" in FUSED and "float8_e5m2fnuz" in FUSED and "p3109_k8p3se" in FUSED
    assert {"float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "p3109_k4p2se"} <= set(FUSED)
    assert all(fp8kit.get_format(n).bits <= 8 and fp8kit.get_format(n).signed for n in FUSED)
    assert not {"p3109_k8p1se", "p3109_k6p1sf", "p3109_k8p3ue", "bfloat16"} & set(FUSED)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("name", FUSED)
def test_fused_rows_of_every_format_equal_quantize_then_error_metrics(name, dtype):
    # blocks with and without NaN/Inf (the kernel's fast and careful paths), values around
    # the format's overflow threshold, its smallest normal and subnormal, and zeros
    fmt = fp8kit.get_format(name)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 2304)) * 10.0 ** rng.integers(-3, 3, (4, 1))).astype(np.float32)
    ovf, _ = km.overflow_threshold(fmt)
    edges = [ovf, fmt.max, fmt.smallest_normal, fmt.smallest_subnormal, 0.0]
    edge = np.array([e * f for e in edges for f in (1.0, 1 - 2**-7, 1 + 2**-7)], np.float32)
    if dtype == np.float16:  # (float16 data: its own range)
        edge = edge[edge <= np.finfo(np.float16).max]
    x[1, : 2 * edge.size] = np.concatenate([edge, -edge])
    finite = x.astype(dtype)
    x[2, 5], x[3, 2000] = np.nan, -np.inf
    x = x.astype(dtype)
    for data, bad in ((finite, 0), (x, 1)):
        rows = study.sweep({"x": data}, [name], ["none", "channel", "block:32"])
        for r in rows:
            kind, kw = r.scaling.split(":")[0], {}
            if kind == "block":
                kw = dict(block_size=32, axis=-1)
            q = study.quantize(data, name, kind, **kw)
            s = study.scale_for(data, name, kind, **kw)
            if kind == "block":
                s = np.repeat(s, 32, axis=-1)
            same_metrics(r.metrics, study.error_metrics(data, q, fmt=name, scale=s))
            assert r.metrics.nan_inputs == bad and r.metrics.inf_inputs == bad


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_the_fused_pass_leaves_nan_and_inf_to_the_two_passes(dtype, monkeypatch):
    """Finite data is measured by the fused pass alone; data with a NaN or an Inf (or
    float16 results that overflow to Inf) by quantize and the metrics kernel, whose
    careful formula the fused kernel does not compile."""
    from fp8kit.study import _chunks

    seen = []
    two_pass = _chunks.metric_totals
    monkeypatch.setattr(_chunks, "metric_totals", lambda *a: seen.append(1) or two_pass(*a))
    x = np.random.default_rng(4).standard_normal((16, 256)).astype(np.float32)
    finite = study.sweep(x.astype(dtype), ["float8_e4m3fn"], ["tensor", "block:32"])
    assert not seen
    assert all(r.metrics.nan_inputs == r.metrics.inf_inputs == 0 for r in finite)
    x[7, 100] = np.nan
    rows = study.sweep(x.astype(dtype), ["float8_e4m3fn"], ["tensor", "block:32"])
    assert len(seen) == 2
    assert all(r.metrics.nan_inputs == 1 for r in rows)


@pytest.mark.parametrize("narrow", ["float32", "float16", "bfloat16"])
def test_formats_share_the_compiled_fused_kernel(narrow):
    # one build per data type, not one per format (~0.5 s each, cold); the fnuz formats
    # included (their zeros lose the sign, which no figure sees: tested above)
    built = [km.quantize_metrics_kernel(fp8kit.get_format(n), narrow).build() for n in FUSED]
    # (a native kernel's compiled function is its address; a Numba kernel's, its dispatcher)
    fns = {b.address if hasattr(b, "address") else b.func for b in built}
    assert len(fns) == 1


def test_float32_and_float16_data_share_the_fused_kernel():
    """The fused kernel reads the narrowing (none or float16) at run time: a sweep of
    float16 data after float32 data compiles no second kernel; bfloat16 data (read as its
    bits) has its own."""
    fmt = fp8kit.get_format("float8_e4m3fn")
    kernels = {n: km.quantize_metrics_kernel(fmt, n) for n in ("float32", "float16", "bfloat16")}
    assert kernels["float32"]._key == kernels["float16"]._key != kernels["bfloat16"]._key
    built = [kernels[n].build() for n in ("float32", "float16")]
    fns = {b.address if hasattr(b, "address") else b.func for b in built}
    assert len(fns) == 1


def _narrowing(kind):
    """A compiled function applying the fused kernel's rounding to float16 / bfloat16
    (``metrics.narrow_bits``) to float32 bits, one element at a time."""
    from numba import njit

    narrow_bits = km.narrow_bits

    @njit
    def run(bits, out):
        for i in range(bits.size):
            out[i] = narrow_bits(bits[i], kind)

    return run


@pytest.mark.parametrize("narrow", ["float16", "bfloat16"])
def test_narrowing_rounds_every_float32_as_numpy_and_ml_dtypes(narrow):
    # every sign, exponent and upper mantissa (the top 16 bits), each with the low halves
    # where float16 (13 dropped bits, more in its subnormals) and bfloat16 (16) round: ties
    # with an even and an odd kept bit, their neighbours, and random ones
    from fp8kit._kernels.fake import _KIND

    rng = np.random.default_rng(16)
    lows = [0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x2FFF, 0x3000, 0x3001, 0x7FFF, 0x8000,
            0x8001, 0xFFFF]  # fmt: skip
    lows = np.array(lows + list(rng.integers(0, 1 << 16, 8)), np.uint32)
    bits = ((np.arange(1 << 16, dtype=np.uint32)[:, None] << 16) | lows).ravel()
    got = np.empty_like(bits)
    _narrowing(_KIND[narrow])(bits, got)
    dtype = np.float16 if narrow == "float16" else ml_dtypes.bfloat16
    with np.errstate(over="ignore", invalid="ignore"):
        want = bits.view(np.float32).astype(dtype).astype(np.float32)
    nan = np.isnan(want)
    assert (np.isnan(got.view(np.float32)) == nan).all()
    assert (got[~nan] == want.view(np.uint32)[~nan]).all()


@pytest.mark.parametrize("name", ["float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"])
def test_fp4_and_fp6_take_the_kernels_and_keep_nan(name, monkeypatch):
    # (they took numpy steps: 4-6x float8's time, and NaN came back as -0, a format
    # without NaN's code for it, where the docs say NaN is kept)
    x = np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32)
    x[0, 1], x[1, 2], x[2, 3] = np.nan, np.inf, -np.nan
    want = {kind: study.quantize(x, name, kind) for kind in ("none", "tensor", "channel", "block")}
    from fp8kit.study import scaling

    def refused(*a, **k):
        raise AssertionError("numpy steps")

    monkeypatch.setattr(scaling, "scaled_round_numpy", refused)
    fmt = fp8kit.get_format(name)
    for kind, q in want.items():
        assert np.isnan(q[0, 1]) and np.isnan(q[2, 3]), kind
        assert np.array_equal(study.quantize(x, name, kind), q, equal_nan=True)
        # the values are round_to's of the scaled data, saturated
        s = study.scale_for(x, name, kind, **({"block_size": 32} if kind == "block" else {}))
        if kind == "block":
            s = np.repeat(s, 32, axis=-1)
        y = np.clip(x * s, -fmt.max, fmt.max)
        ok = np.isfinite(x)
        assert np.array_equal(q[ok], (fp8kit.round_to(y, name) / s)[ok], equal_nan=True), kind
    rows = study.sweep({"x": x}, [name], ["none", "tensor", "channel", "block:32"])
    assert all(r.metrics.nan_inputs == 2 for r in rows)
