"""study.gemm_error against an independent numpy computation; how accumulation error grows
with K; its errors; docs/gemm.md's measurement against docs/make_gemm_error.py."""

import importlib.util
import math
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8kit import study
from fp8kit.study.gemm import ACCUMULATORS, parse_accumulator

DOCS = Path(__file__).resolve().parent.parent / "docs"
E4M3 = ml_dtypes.float8_e4m3fn


def sqnr(ref: np.ndarray, y: np.ndarray) -> float:
    err = np.sum((np.asarray(y, np.float64) - ref) ** 2)
    return math.inf if err == 0 else 10 * math.log10(np.sum(ref**2) / err)


def numpy_quantize(a: np.ndarray, per_row: bool):
    """e4m3 codes and float32 inverse scales of the tensor/channel recipe, in plain numpy
    and ml_dtypes: scale = 448 / amax (float64, then float32), codes = RNE(a * scale)."""
    amax = np.abs(a).max(axis=1, keepdims=True) if per_row else np.abs(a).max()
    s = (448.0 / np.asarray(amax, np.float64)).astype(np.float32)
    codes = (a * s).astype(E4M3)  # (a * s <= 448 * (1 + 2**-23): rounds to 448, no NaN)
    inv = (1.0 / s.astype(np.float64)).astype(np.float32)
    return codes, inv


@pytest.fixture(scope="module")
def layer():
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((24, 384)) * np.exp(rng.standard_normal((24, 1)))).astype(np.float32)
    x = rng.standard_normal((6, 384)).astype(np.float32)
    x[:, 5] *= 30.0  # an outlier channel
    return w, x


@pytest.mark.parametrize("scaling", ["tensor", "channel"])
def test_exact_accumulator_matches_numpy(layer, scaling):
    w, x = layer
    per_row = scaling == "channel"
    cw, iw = numpy_quantize(w, per_row)
    cx, ix = numpy_quantize(x, per_row)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    deq_w = cw.astype(np.float64) * iw
    deq_x = cx.astype(np.float64) * ix
    ref_q = deq_x @ deq_w.T
    # the exact sum of e4m3 products is exact in float64 (multiples of 2**-18 below 2**52
    # of them), rounded once to float32, then cuBLAS's epilogue RN32(acc * RN32(sa * sb))
    acc = (cx.astype(np.float64) @ cw.astype(np.float64).T).astype(np.float32)
    alpha = ix.reshape(-1, 1) * iw.reshape(1, -1) if per_row else ix * iw  # float32 products
    y = (acc.astype(np.float64) * np.float32(alpha).astype(np.float64)).astype(np.float32)
    (r,) = study.gemm_error(w, x, "float8_e4m3fn", scaling, ["exact"])
    assert r.quantization.sqnr_db == pytest.approx(sqnr(ref, ref_q), rel=1e-9)
    assert r.error.sqnr_db == pytest.approx(sqnr(ref, y), rel=1e-9)
    assert r.accumulation.sqnr_db == pytest.approx(sqnr(ref_q, y), rel=1e-6)
    assert r.accumulation.sqnr_db > 135  # a few fp32 roundings
    assert r.error.rmse == pytest.approx(np.sqrt(np.mean((y - ref) ** 2)), rel=1e-9)
    nz = ref != 0
    assert r.error.max_rel_error == pytest.approx(np.max(np.abs(y - ref)[nz] / np.abs(ref[nz])))
    assert (r.tokens, r.out_features, r.k) == (6, 24, 384)
    assert r.instruction is None and r.promote_every is None and r.notes == ()


def test_mx_blocks_match_quantize(layer):
    """MX blocks along K: the exact accumulator's quantized operands are quantize()'s
    (power-of-two scales: codes times inverse scales is exact)."""
    w, x = layer
    qw = study.quantize(w, "float8_e4m3fn", "block", block_size=32, axis=-1)
    qx = study.quantize(x, "float8_e4m3fn", "block", block_size=32, axis=-1)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    ref_q = qx.astype(np.float64) @ qw.astype(np.float64).T
    res = study.gemm_error(w, x, "float8_e4m3fn", "block:32",
                           ["exact", "hopper-promote32", "blackwell-mx"])  # fmt: skip
    for r in res:
        assert r.quantization.sqnr_db == pytest.approx(sqnr(ref, ref_q), rel=1e-9)
    exact, promoted, mx = res
    assert exact.accumulation.sqnr_db > 140
    assert promoted.promote_every == 32 and "m64n256k32.f32.e4m3.e4m3" in promoted.instruction
    assert 60 < promoted.accumulation.sqnr_db < exact.accumulation.sqnr_db
    # Blackwell's block-scaled step keeps 25 fractional bits: near-exact
    assert mx.instruction.startswith("Blackwell tcgen05.mma.block_scale")
    assert mx.accumulation.sqnr_db > 120


def test_fast_accumulation_error_grows_with_k():
    rng = np.random.default_rng(3)
    fast, promoted = [], []
    for k in (256, 1024, 4096):
        w = rng.uniform(0, 1, (8, k)).astype(np.float32)  # positive: the truncation's bias
        x = rng.uniform(0, 1, (4, k)).astype(np.float32)  # adds up, nothing cancels
        f, p = study.gemm_error(w, x, "float8_e4m3fn", "tensor",
                                ["hopper-fast", "hopper-promote128"])  # fmt: skip
        fast.append(f.accumulation.sqnr_db)
        promoted.append(p.accumulation.sqnr_db)
        assert f.accumulation.max_rel_error > p.accumulation.max_rel_error
    # each 4x longer K loses about 12 dB (the error grows ~linearly with the steps)
    assert fast[0] - fast[1] > 8 and fast[1] - fast[2] > 8
    assert max(promoted) - min(promoted) < 3  # promotion every 128 holds it
    assert fast[2] < 30 < min(promoted)


def test_accumulators_and_formats(layer):
    w, x = layer
    res = study.gemm_error(w[:, :100], x[:, :100], "float8_e5m2", "channel",
                           ["hopper-fast", "ada", "blackwell", "fp32", "fp32-pairwise"],
                           x_fmt="float8_e4m3fn")  # fmt: skip
    hopper, ada, blackwell, fp32, pairwise = res
    assert hopper.instruction == "Hopper wgmma m64n256k32.f32.e4m3.e5m2"
    assert ada.instruction == "Ada Lovelace mma m16n8k32.f32.e4m3.e5m2.f32"
    assert blackwell.instruction == "Blackwell tcgen05.mma m128n256k32.kind::f8f6f4.f32.e4m3.e5m2"
    assert hopper.notes == ("K padded with zeros from 100 to 128",) and fp32.notes == ()
    assert (hopper.w_format, hopper.x_format) == ("float8_e5m2", "float8_e4m3fn")
    for r in res:  # one quantization for all of them
        assert r.quantization == hopper.quantization and r.k == 100
    assert fp32.accumulation.sqnr_db > 130 and pairwise.accumulation.sqnr_db > 130
    (bf,) = study.gemm_error(w, x, "bfloat16", "none", ["hopper-fast"])
    assert bf.instruction.endswith("m64n256k16.f32.bf16.bf16")
    d = bf.as_dict()
    assert {"sqnr_db", "acc_sqnr_db", "quant_sqnr_db", "acc_max_rel_error", "notes"} <= set(d)
    assert d["accumulator"] == "hopper-fast" and d["w_scaling"] == "none"


def test_mixed_recipes(layer):
    """Per-channel weights with MX activations (blocks of 128, DeepSeek-V3's 1 x 128
    tiles): per-group scales at each promotion; the exact sum folds the blocks and
    applies the channel scales in the epilogue."""
    w, x = layer
    accs = ["hopper-promote128", "exact", "fp32"]
    res = study.gemm_error(w, x, "float8_e4m3fn", "channel", accs, x_scaling="block:128")
    promoted, exact, fp32 = res
    assert (promoted.w_scaling, promoted.x_scaling) == ("channel", "block:128")
    assert exact.accumulation.sqnr_db > 140 and fp32.accumulation.sqnr_db > 130
    assert 60 < promoted.accumulation.sqnr_db < exact.accumulation.sqnr_db
    assert promoted.error.sqnr_db == pytest.approx(exact.error.sqnr_db, abs=0.05)
    (plain,) = study.gemm_error(w, x, scaling="none", accumulators="hopper-promote128")
    assert plain.x_scaling == "none" and plain.promote_every == 128


@pytest.mark.parametrize(
    "kwargs, match",
    [
        pytest.param(dict(accumulators="hopper"), "unknown accumulator 'hopper'; valid: exact",
                     id="unknown"),  # fmt: skip
        pytest.param(dict(accumulators="ada-promote0"), "unknown accumulator", id="promote0"),
        pytest.param(dict(accumulators=[]), "at least one", id="none"),
        pytest.param(dict(scaling="delayed"), "scaling 'delayed' does not apply to one GEMM",
                     id="delayed"),  # fmt: skip
        pytest.param(dict(scaling="nvfp4"), "scaling 'nvfp4' does not apply", id="nvfp4"),
        pytest.param(dict(scaling="tile:128"), "scaling 'tile:128' does not apply", id="tile"),
        pytest.param(dict(x_scaling="block:32:rceil"), "x_scaling 'block:32:rceil' does not",
                     id="rceil"),  # fmt: skip
        pytest.param(dict(scaling="block:32", accumulators="hopper-fast"),
                     "applies the scales once.*hopper-promote32.*blackwell-mx", id="mx-fast"),
        pytest.param(dict(scaling="block:32", accumulators="hopper-promote128"),
                     "promotes every 128 elements of K, but block:32", id="mx-promote"),
        pytest.param(dict(accumulators="blackwell-mx"), "both operands need scaling block:32",
                     id="mx-instruction"),  # fmt: skip
        pytest.param(dict(accumulators="hopper-promote48"),
                     "interval 48 must be a multiple of the instruction's k \\(32", id="nc"),
        pytest.param(dict(fmt="float8_e4m3fnuz", accumulators="hopper-fast"),
                     "multiplies e4m3, e5m2.*got x float8_e4m3fnuz", id="format"),
        pytest.param(dict(fmt="e4m3"), "unknown fmt 'e4m3'; valid", id="unknown-format"),
    ],
)  # fmt: skip
def test_value_errors(layer, kwargs, match):
    w, x = layer
    with pytest.raises(ValueError, match=match):
        study.gemm_error(w, x, **kwargs)


def test_shape_and_type_errors(layer):
    w, x = layer
    with pytest.raises(ValueError, match=r"x has shape \(6, 100\) but w has \(24, 384\)"):
        study.gemm_error(w, x[:, :100])
    with pytest.raises(ValueError, match=r"w must be 2-D, \(out_features, K\); got shape"):
        study.gemm_error(w[0], x)
    with pytest.raises(TypeError, match="x must have dtype"):
        study.gemm_error(w, x.astype(np.int32))


def test_accumulator_names():
    for name in ACCUMULATORS:
        acc = parse_accumulator(name.replace("<N>", "64"))
        assert (acc.promote_every == 64) == ("<N>" in name)


# -- docs/gemm.md ---------------------------------------------------------------------------
def load_generator():
    spec = importlib.util.spec_from_file_location("make_gemm_error", DOCS / "make_gemm_error.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_measurement_is_current():
    gen = load_generator()
    page = (DOCS / "gemm.md").read_text()
    ks = gen.KS[:2]  # the first rows: the rest take seconds (python docs/make_gemm_error.py)
    fresh = gen.tables(gen.measure(ks), ks)
    for kind, table in fresh.items():
        block = re.search(rf"<!-- gemm-error:{kind} begin -->\n(.*?)<!-- gemm-error:{kind} end",
                          page, re.S)  # fmt: skip
        assert block, kind
        lines = block[1].splitlines()
        assert len(lines) == 2 + len(gen.KS)
        assert lines[: 2 + len(ks)] == table.splitlines(), "run: python docs/make_gemm_error.py"
    assert (DOCS / gen.FIGURE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"]({gen.FIGURE})" in page
    assert gen.fill(page, {k: "x" for k in fresh}) != page  # the markers are found
