"""The GPU twin of the matrix-product kernels (fp8kit.cuda._mma), bit for bit against the CPU.

Each case prepares one small product (16 x 8 outputs, K up to 64: the simulator runs a
Python thread per output) for the scalar kernel (``prepare(..., fast=False)``) and compares
the GPU's float64 outputs with the CPU generic kernel's (and the fast kernel's, which
``fp8kit.matmul`` runs where it applies), and the outputs finished as the D type.
Operands span their type's exponents (every 8-bit code), with products that cancel
exactly, zeros, subnormals, and NaN/Inf where the case says so.
"""

import zlib

import ml_dtypes
import numpy as np
import pytest

from fp8kit import mma
from fp8kit._kernels import mma as K
from fp8kit.cuda import _mma
from fp8kit.mma import _engine
from fp8kit.mma._types import TYPES

from .simdata import same_bits

M, N = 16, 8


def _codes(type_name, shape, rng, limit):
    """Random finite values of an 8-bit (or narrower) type, by code: every finite code up
    to ``limit`` in magnitude equally likely (so every exponent, subnormals and zeros)."""
    dt = TYPES[type_name].dtype
    with np.errstate(invalid="ignore", over="ignore"):
        vals = np.unique(np.arange(256, dtype=np.uint8).view(dt).astype(np.float64))
    finite = vals[np.isfinite(vals) & (np.abs(vals) <= limit)]
    return rng.choice(np.concatenate([finite, -finite]), size=shape)


def _wide(shape, rng, spread):
    return rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))


def operand(type_name, shape, rng, limit=np.inf):
    """An operand array of the type's dtype (values chosen as float64, then cast: exact for
    the 8-bit types, rounded for the wider ones); 8-bit values up to ``limit``."""
    t = TYPES[type_name]
    if t.narrow:
        x = _codes(type_name, shape, rng, limit)
    else:
        spread = {"f16": 6, "bf16": 30, "f64": 60}.get(type_name, 30)
        x = _wide(shape, rng, spread)
        x[rng.random(shape) < 0.1] = 0.0
    return x.astype(t.dtype)


def cancel(a, b):
    """Make products cancel: in the first rows of A and columns of B, neighbouring products
    are equal and opposite (a[m, 2i + 1] = -a[m, 2i], b[2i + 1, n] = b[2i, n])."""
    a, b = a.copy(), b.copy()
    even = a.shape[1] // 2 * 2
    a[: M // 2, 1:even:2] = -a[: M // 2, 0:even:2]
    b[1:even:2, : N // 2] = b[0:even:2, : N // 2]
    return a, b


def plant_specials(a, b):
    """NaN in row 0 of A, +Inf in row 1 and -Inf in column 2 of B (NaN in types without
    Inf: ml_dtypes' casts of Inf to the fn types give NaN)."""
    a, b = a.copy(), b.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        a[0, 1] = np.nan
        a[1, 2] = np.inf
        b[3, 2] = -np.inf
    return a, b


def c_values(c_type, rng, specials=False):
    dt = TYPES[c_type].dtype
    c = _wide((M, N), rng, 12 if c_type == "f16" else 40)
    c[rng.random((M, N)) < 0.15] = 0.0
    if specials:
        c[0, 0], c[1, 1], c[2, 2] = np.inf, -np.inf, np.nan
    with np.errstate(over="ignore"):
        return c.astype(dt).astype(np.float64)


def scale_values(type_name, rows, blocks, rng):
    """Block scales as prepare takes them (float64 values): ue8m0 powers of two, ue4m3
    positive e4m3 values (every exponent)."""
    if type_name == "ue8m0":
        return np.exp2(rng.integers(-12, 12, (rows, blocks))).astype(np.float64)
    codes = rng.integers(1, 0x7F, (rows, blocks)).astype(np.uint8)
    return codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def check(inst, a, b, c, **kw):
    """The GPU's outputs (float64 and finished as the D type) equal the CPU generic
    kernel's, bits and all, and the fast kernel's where one applies; returns the CPU's
    float64 outputs."""
    prep = _engine.prepare(inst, a, b, c, fast=False, **kw)
    cpu = _engine.launch(prep)
    gpu = _mma.launch_device(prep)
    same_bits(gpu, cpu)
    same_bits(gpu, _engine.launch(_engine.prepare(inst, a, b, c, **kw)))  # (the fast kernel)
    if isinstance(inst, str):
        d_type, canonical = "f32", True
    else:
        d_type = "f32" if kw.get("nc") else inst.d_type
        canonical = bool(kw.get("nc")) or inst.model in _engine._CANONICAL
    d = _mma.matmul_device(prep, d_type, canonical).copy_to_host()
    same_bits(d, _engine.finish(cpu, d_type, canonical))
    return cpu


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Compile the scalar code once on this thread (the simulator runs it compiled for the
    CPU), not in the middle of a launch's 128 threads."""
    prep = _engine.prepare("exact", np.ones((1, 1)), np.ones((1, 1)), np.zeros((1, 1)))
    buf = np.empty(K.SCRATCH)
    args = (prep.sa, prep.ea, prep.sb, prep.eb, prep.va, prep.vb, 0, 0, 1, 0.0, prep.params,
            prep.scale_a, prep.scale_b, prep.gscale_a, prep.gscale_b, buf,
            int(prep.params[K.P_MODEL]))  # fmt: skip
    assert K.output(*args) == 1.0


# (arch, kind, name, K, specials): each a model family of fp8kit.mma
CASES = [
    pytest.param("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3", 64, False, id="hopper-e4m3-f32"),
    pytest.param("Hopper", "wgmma", "m64n8k32.f16.e4m3.e4m3", 64, False, id="hopper-e4m3-f16"),
    pytest.param("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3", 32, True, id="hopper-nan-inf"),
    pytest.param("Ada Lovelace", "mma", "m16n8k32.f32.e5m2.e5m2.f32", 64, False, id="ada-e5m2"),
    pytest.param(
        "Ada Lovelace", "mma", "m16n8k32.f16.e5m2.e5m2.f16", 32, True, id="ada-e5m2-f16-nan-inf"
    ),
    pytest.param("Ampere", "mma", "m16n8k16.f32.bf16.bf16.f32", 32, False, id="ampere-bf16"),
    pytest.param("Ampere", "mma", "m16n8k8.f32.tf32.tf32.f32", 16, False, id="ampere-tf32"),
    pytest.param("Volta", "mma", "m8n8k4.f16.f16.f16.f16", 16, False, id="volta-f16"),
    pytest.param("CDNA1", "mfma", "f32_16x16x16f16", 32, False, id="cdna1-f16"),
    pytest.param("CDNA2", "mfma", "f32_16x16x8bf16", 16, False, id="cdna2-bf16"),
    pytest.param("CDNA2", "mfma", "f32_16x16x16bf16_1k", 32, False, id="cdna2-bf16-1k"),
    pytest.param("CDNA3", "mfma", "f32_16x16x32_fp8_bf8", 64, False, id="cdna3-fp8"),
    pytest.param("CDNA3", "mfma", "f32_16x16x16_f16", 32, False, id="cdna3-f16"),
    pytest.param("CDNA3", "mfma", "f32_16x16x8_xf32", 16, False, id="cdna3-xf32"),
    pytest.param("CDNA3", "mfma", "f64_16x16x4_f64", 8, True, id="cdna3-f64-fma"),
    pytest.param("CDNA1", "mfma", "f32_16x16x4f32", 8, False, id="cdna1-f32-fma"),
]


@pytest.mark.parametrize("arch, kind, name, k, specials", CASES)
def test_instruction_chain_matches_the_cpu(arch, kind, name, k, specials):
    inst = mma.instruction(arch, kind, name)
    rng = np.random.default_rng(zlib.crc32(f"{name}{specials}".encode()))
    limit = 16.0 if inst.d_type == "f16" else np.inf  # (most f16 sums would overflow)
    a = operand(inst.a_type, (M, k), rng, limit)
    a, b = cancel(a, operand(inst.b_type, (k, N), rng, limit))
    if specials:
        a, b = plant_specials(a, b)
    cpu = check(inst, a, b, c_values(inst.c_type, rng, specials))
    assert np.isfinite(cpu).sum() > M * N // 2  # (the data exercise the arithmetic)
    if specials:
        assert np.isnan(cpu).any()


def test_an_accumulator_that_overflows_mid_chain_stays_infinite():
    """An f16 step whose sum overflows gives +-Inf, which the next steps (finite operands)
    keep: the CPU's scalar step and the GPU's agree."""
    inst = mma.instruction("Hopper", "wgmma", "m64n8k32.f16.e4m3.e4m3")
    rng = np.random.default_rng(5)
    a = operand("e4m3", (M, 64), rng, 2.0)
    b = operand("e4m3", (64, N), rng, 2.0)
    a[:, :2], b[:2, :] = 448.0, 448.0  # 2 * 448**2 > 65504
    b[:2, N // 2 :] = -448.0
    cpu = check(inst, a, b, np.zeros((M, N)))
    assert (cpu[:, : N // 2] == np.inf).all() and (cpu[:, N // 2 :] == -np.inf).all()


BLOCK_SCALED = [
    pytest.param("m16n8k32.kind::mxf8f6f4.block32.f32.e4m3.e5m2.f32.ue8m0", 64,
                 id="mxf8f6f4-ue8m0"),
    pytest.param("m16n8k32.kind::mxf8f6f4.block32.f32.e2m1.e3m2.f32.ue8m0", 32,
                 id="mxf8f6f4-fp4-fp6"),
    pytest.param("m16n8k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.f32.ue4m3", 64,
                 id="mxf4nvf4-ue4m3"),
]  # fmt: skip


@pytest.mark.parametrize("name, k", BLOCK_SCALED)
def test_block_scaled_instructions_match_the_cpu(name, k):
    inst = mma.instruction("RTX Blackwell", "mma.block_scale", name)
    rng = np.random.default_rng(7)
    a = operand(inst.a_type, (M, k), rng)
    b = operand(inst.b_type, (k, N), rng)
    a, b = cancel(a, b)
    nb = k // inst.block
    sa = scale_values(inst.scale_type, M, nb, rng)
    sb = scale_values(inst.scale_type, N, nb, rng)  # (N x blocks: prepare's layout)
    check(inst, a, b, c_values(inst.c_type, rng), scale_a=sa, scale_b=sb)


def test_promoted_chain_with_group_scales_matches_the_cpu():
    """P_NC > 0: the instruction's accumulator restarts every NC elements of K and is added
    into a float32 accumulator with the group's two scales (DeepSeek-V3's promotion)."""
    inst = mma.instruction("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
    rng = np.random.default_rng(3)
    k, nc = 64, 32
    a, b = cancel(operand("e4m3", (M, k), rng), operand("e4m3", (k, N), rng))
    g = k // nc
    ga = _wide((M, g), rng, 8).astype(np.float32).astype(np.float64)
    gb = _wide((N, g), rng, 8).astype(np.float32).astype(np.float64)
    cpu = check(inst, a, b, c_values("f32", rng), nc=nc, gscale_a=ga, gscale_b=gb)
    assert (cpu != check(inst, a, b, c_values("f32", rng), nc=nc)).any()


@pytest.mark.parametrize("acc", ["exact", "fp32", "fp32-pairwise"])
@pytest.mark.parametrize("specials", [False, True], ids=["finite", "nan-inf"])
def test_accumulators_that_are_not_hardware_match_the_cpu(acc, specials):
    rng = np.random.default_rng(11)
    k = 37  # (not a power of two: the pairwise tree has several roots)
    a = _wide((M, k), rng, 40).astype(np.float32)
    b = _wide((k, N), rng, 40).astype(np.float32)
    a, b = cancel(a, b)
    a[:, -1] = 2.0**-149  # float32's smallest subnormal
    if specials:
        a, b = plant_specials(a, b)
    check(acc, a, b, c_values("f32", rng, specials))


def test_exact_accumulator_keeps_what_float32_sums_lose():
    """One large product, many small ones that a float32 sum drops, one that cancels the
    large: only the exact sum keeps the small ones."""
    a = np.ones((M, 34), np.float32)
    b = np.full((34, N), 2.0**-30, np.float32)
    b[0], b[1], a[:, 1] = 1.0, 1.0, -1.0
    got = check("exact", a, b, np.zeros((M, N)))
    assert (got == np.float32(32 * 2.0**-30)).all()


def test_empty_products():
    prep = _engine.prepare("exact", np.ones((M, 0)), np.ones((0, N)), np.full((M, N), 2.0),
                           fast=False)  # fmt: skip
    assert (_mma.launch_device(prep) == 2.0).all()
    prep = _engine.prepare("fp32", np.ones((0, 4)), np.ones((4, N)), np.zeros((0, N)),
                           fast=False)  # fmt: skip
    assert _mma.launch_device(prep).shape == (0, N)


def test_a_prepared_product_for_the_fast_kernel_is_refused():
    inst = mma.instruction("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
    rng = np.random.default_rng(0)
    prep = _engine.prepare(inst, operand("e4m3", (M, 32), rng), operand("e4m3", (32, N), rng),
                           np.zeros((M, N)))  # fmt: skip
    if prep.fast is not None:
        with pytest.raises(ValueError, match="fast=False"):
            _mma.matmul_device(prep)


def test_host_and_device_copies_hold_codes():
    from numba import cuda

    x = np.arange(6, dtype=np.uint8).reshape(2, 3)
    h = _mma.to_host(cuda.to_device(x), ml_dtypes.float8_e4m3fn)
    assert h.dtype == ml_dtypes.float8_e4m3fn and (h.view(np.uint8) == x).all()
    assert _mma.to_host(x) is x
    y = _mma.to_device(x.view(ml_dtypes.float8_e4m3fn))
    assert y.dtype == np.uint8 and (y.copy_to_host() == x).all()


@pytest.mark.parametrize("promote", [None, 32], ids=["chained", "promoted"])
def test_matmul_dispatches_device_arrays(promote):
    """fp8kit.matmul given device arrays (float8 as their uint8 codes) runs on the GPU and
    returns a device array: the CPU's bits."""
    from numba import cuda

    import fp8kit

    rng = np.random.default_rng(7)
    inst = mma.instruction("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
    a = operand("e4m3", (5, 64), rng)
    b = operand("e4m3", (64, 3), rng)
    c = rng.standard_normal((5, 3)).astype(np.float32)
    want = fp8kit.matmul(a, b, c, instruction=inst, promote_every=promote)
    d_a = cuda.to_device(a.view(np.uint8))
    d_b = cuda.to_device(b.view(np.uint8))
    got = fp8kit.matmul(d_a, d_b, cuda.to_device(c), instruction=inst, promote_every=promote)
    assert hasattr(got, "copy_to_host")  # (a device array)
    same_bits(got.copy_to_host(), want)
