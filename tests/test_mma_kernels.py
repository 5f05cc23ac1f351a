"""The matrix products' CPU kernels (fp8kit._kernels.mma) as the checked entry calls them:
matrices passed 1-D with their shapes in ``dims``, each shape checked against its array
before anything is read or written."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from fp8kit._kernels import mma
from fp8kit.mma import _engine


def _exact_args():
    va, vb = np.ones((2, 3)), np.full((4, 3), 2.0)  # (A rows, B^T rows)
    c, out = np.full((2, 4), 0.5), np.full((2, 4), 7.0)
    p = _engine._params(mma.EXACT, 3)
    return va, vb, c, p, out


def test_the_accumulate_kernel_takes_matrices_flat_with_their_shapes():
    va, vb, c, p, out = _exact_args()
    kernel = mma.kernel("accumulate", mma.EXACT)
    dims = _engine.shapes(va, vb, c, out)
    assert dims.tolist() == [2, 3, 4, 3, 2, 4, 2, 4]
    assert kernel(va.ravel(), vb.ravel(), c.ravel(), p, out.ravel(), dims, 1) == 0
    assert (out == 6.5).all()


@pytest.mark.parametrize(
    "which, value",
    [(0, 3), (1, 4), (6, 1), (7, 2), (0, -2)],
    ids=["rows_past_a", "columns_past_a", "rows_short_of_out", "columns_short_of_out",
         "negative"],
)  # fmt: skip
def test_a_shape_that_does_not_fit_its_array_writes_nothing(which, value):
    """A ``dims`` entry that would read past an array (or leave part of out unwritten):
    the kernel returns BAD_SHAPES and writes nothing; the engine raises on it."""
    va, vb, c, p, out = _exact_args()
    dims = _engine.shapes(va, vb, c, out)
    dims[which] = value
    if which == 0 and value < 0:
        dims[1] = -3  # (a product that matches the size: the signs are checked too)
    kernel = mma.kernel("accumulate", mma.EXACT)
    got = kernel(va.ravel(), vb.ravel(), c.ravel(), p, out.ravel(), dims, 1)
    assert got == mma.BAD_SHAPES
    assert (out == 7.0).all()
    with pytest.raises(RuntimeError, match="refused its arrays' shapes"):
        _engine._checked(got)


def test_every_kernel_checks_each_of_its_shapes():
    """Each matrix of the generic and fast kernels is checked: one shape off at a time."""
    rng = np.random.default_rng(0)
    m, n, k = 3, 5, 64
    f64, i64 = np.float64, np.int64
    generic = [rng.random((m, k)), np.zeros((m, k), i64), rng.random((n, k)),
               np.zeros((n, k), i64), rng.random((m, k)), rng.random((n, k)),
               np.zeros((m, n)), _engine._params(mma.FUSED, 32), np.ones((1, 1)),
               np.ones((1, 1)), np.ones((m, 1)), np.ones((n, 1)), np.zeros((m, n))]  # fmt: skip
    s = k // 32
    fast = [np.ones((m, k), np.float32), np.zeros((m, k), np.int16),
            np.ones((k, n), np.float32), np.zeros((k, n), np.int16),
            np.zeros((m, s), np.uint8), np.zeros((s, n), np.uint8),
            np.zeros((m, s), np.uint8), np.zeros((s, n), np.uint8),
            np.zeros((1, 1)), np.zeros((1, 1), i64), np.zeros((1, 1)), np.zeros((1, 1), i64),
            np.zeros((m, n)), _engine._params(mma.FUSED, 32), np.ones((m, 1)),
            np.ones((n, 1)), np.zeros((m, n), f64)]  # fmt: skip
    for kernel, args in ((mma.kernel("generic", mma.FUSED), generic),
                         (mma.kernel("fast", lanes=np.float32), fast)):  # fmt: skip
        flat = [a.reshape(-1) for a in args]
        dims = _engine.shapes(*args)
        assert kernel(*flat, dims, 1) == 0
        for i in range(dims.size // 2):
            wrong = dims.copy()
            wrong[2 * i] += 1
            assert kernel(*flat, wrong, 1) == mma.BAD_SHAPES, (kernel, i)


def test_the_entry_refuses_a_matrix_passed_as_one():
    """The kernels take 1-D arrays of their dtypes: a 2-D one, or another dtype, raises
    TypeError before anything runs (the checked entry; a dispatcher likewise)."""
    va, vb, c, p, out = _exact_args()
    kernel = mma.kernel("accumulate", mma.EXACT)
    dims = _engine.shapes(va, vb, c, out)
    with pytest.raises(TypeError):
        kernel(va, vb.ravel(), c.ravel(), p, out.ravel(), dims, 1)
    with pytest.raises(TypeError):
        kernel(va.ravel().astype(np.float32), vb.ravel(), c.ravel(), p, out.ravel(), dims, 1)
    assert (out == 7.0).all()


@pytest.mark.parametrize("name", ["generic", "accumulate", "normalize", "fast"])
def test_each_kernel_flattens_into_one_function(name):
    """Each kernel is written out as one function (fp8kit._kernels.flatten), its model's
    code alone: its compile links no other compiled function (each a compile of its own,
    and the kernel's machine code then made on the calling thread).  A cold first
    ``matmul`` took 2.2-2.25 s with the fast kernel's scalar step, min and max linked,
    1.7-1.8 s without; a first CDNA3 product 7.3 s with every model in its kernel."""
    from fp8kit._kernels import flatten

    make = {"generic": functools.partial(mma._generic, model=mma.PAIRS),
            "accumulate": functools.partial(mma._accumulate, model=mma.EXACT),
            "normalize": mma._normalize_all,
            "fast": functools.partial(mma._fast, lanes=np.float32)}[name]  # fmt: skip
    source = flatten.flatten(make(False)).__flat_source__
    for call in ("step(", "step_fused(", "exact_dot(", "output(", "min(", "max(", "fits("):
        assert call not in source
    if name == "generic":  # (the two-stage model's sums, not the other models')
        assert "_fused_sum" in source and "expansion" not in source and "ftz" not in source
    if name == "accumulate":
        assert "expansion" in source and "pairwise" not in source


def test_a_kernel_is_one_model_s():
    with pytest.raises(ValueError, match="model is 99"):
        mma.kernel("generic", 99)


_EVERY_MODEL = """
import json
import ml_dtypes, numpy as np
import fp8kit
from fp8kit.mma import TYPES, instruction
from fp8kit._kernels import codec, mma, native

rng = np.random.default_rng(0)
names = [
    ("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3"),  # fused, float32 lanes
    ("Volta", "mma", "m8n8k4.f32.f16.f16.f32"),  # fused, float64 lanes
    ("Ampere", "mma", "m8n8k4.f64.f64.f64.f64"),
    ("RTX Blackwell", "mma.block_scale",
     "m16n8k32.kind::mxf8f6f4.block32.f32.e5m2.e5m2.f32.ue8m0"),
    ("RTX Blackwell", "mma.block_scale", "m16n8k64.kind::mxf4.block32.f32.e2m1.e2m1.f32.ue8m0"),
    ("CDNA1", "mfma", "f32_32x32x8f16"),
    ("CDNA2", "mfma", "f32_32x32x8bf16_1k"),
    ("CDNA3", "mfma", "f32_16x16x8_xf32"),
    ("CDNA3", "mfma", "f32_16x16x32_bf8_bf8"),
]
models = []
for name in names:
    inst = instruction(*name)
    k = 2 * max(inst.products, inst.block or 1)

    def operand(t, shape):
        if TYPES[t].dtype == np.uint8:
            return rng.integers(0, 256, shape, dtype=np.uint8)
        return rng.standard_normal(shape).astype(np.float32).astype(TYPES[t].dtype)

    kw = {"out_dtype": np.float64} if inst.d_type == "f64" else {}
    if inst.scale_type:
        s = TYPES[inst.scale_type].dtype
        blocks = k // inst.block
        kw.update(scale_a=np.ones((4, blocks), s), scale_b=np.ones((blocks, 3), s))
    fp8kit.matmul(operand(inst.a_type, (4, k)), operand(inst.b_type, (k, 3)), instruction=inst,
                  **kw)
    models.append(inst.model)
for acc in ("exact", "fp32", "fp32-pairwise"):
    fp8kit.matmul(np.ones((4, 8), np.float32), np.ones((8, 3), np.float32), instruction=acc)
print(json.dumps({"models": models, "lean": native.LEAN_RETRIES, "ssa": native.SSA_RETRIES,
                  "flatten": codec.FLATTEN_FALLBACKS,
                  "built": mma._kernel.cache_info().currsize,
                  "native": native.native_count()}))
"""


def test_every_model_compiles_lean_and_flat(tmp_path):
    """Every model's kernel, the fast kernel's two lane types and the three accumulators,
    compiled in a fresh process with an empty cache: each written out as one function, typed
    by the lean pipeline without a retry (a variable of two types sent the fp32 chain to
    Numba's full pipeline, a first call 0.38 s where it is 0.16 s now), each native."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", _EVERY_MODEL], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert sorted(set(out["models"])) == sorted(mma.MODELS.keys() - {"exact", "sequential",
                                                                      "pairwise"})  # fmt: skip
    assert out["lean"] == [] and out["ssa"] == [] and out["flatten"] == []
    # (normalize, two fast kernels, 7 generic models, 3 accumulators; the entries module)
    assert out["built"] == 13 and out["native"] == 14


def test_the_model_steps_are_written_into_cpu_kernels_and_called_on_a_gpu():
    """The model steps are ``@written_in``: the flattener writes them into the CPU kernels
    (one function per model), while numba.cuda compiles each as a device function of its
    own.  With them ``inline="always"`` the GPU kernel, which holds every model, took 66 s
    to compile for a GPU (Numba's inliner over every model at every call site) where it
    takes 7 s (``tests/test_cuda.py``)."""
    from fp8kit._kernels import flatten

    steps = [mma.output, mma.step, mma.step_fused, mma.step_grouped, mma.step_two_stage,
             mma.step_ftz, mma.step_fma, mma.pairwise_dot, mma.exact_dot, mma.compress,
             mma.expansion_add, mma.expansion_to_f32]  # fmt: skip
    for fn in steps:
        assert flatten._is_inline(fn), fn
        assert fn.targetoptions.get("inline", "never") != "always", fn


_REFUSED_CALL = """
import json
import ml_dtypes, numpy as np
from numba.core import event
import fp8kit
hopper = ("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
with event.install_recorder("fp8kit:compile") as rec:
    try:
        fp8kit.matmul(np.ones((2, 32), np.float32), np.ones((32, 3), np.float32),
                      instruction=hopper)
    except TypeError as exc:
        refused = str(exc)
refused_compiles = len(rec.buffer)
with event.install_recorder("fp8kit:compile") as rec:
    a, b = np.ones((2, 32), ml_dtypes.float8_e4m3fn), np.ones((32, 3), ml_dtypes.float8_e4m3fn)
    got = fp8kit.matmul(a, b, instruction=hopper)
names = [e.data["name"] for _, e in rec.buffer if e.is_start]
print(json.dumps({"refused": refused, "refused_compiles": refused_compiles, "names": names,
                  "got": float(got[0, 0])}))
"""


def test_a_first_fast_product_starts_its_kernel_first_and_a_refused_one_none(tmp_path):
    """A first fast product starts compiling its kernel before the operands' tables (whose
    own small kernel then compiles while LLVM works on the big one: 0.1 s of a 1.5 s first
    call); a call whose operands are not the instruction's types raises before anything
    compiles."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", _REFUSED_CALL], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert "float32" in out["refused"] and out["refused_compiles"] == 0
    kernels = [n for n in out["names"] if n != "native_entries"]
    assert kernels == ["gemm_fast", "normalize_all"], out["names"]
    assert out["got"] == 32.0
