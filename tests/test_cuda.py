"""fp8kit.cuda: the simulator suite, the kernels compiled for a real GPU, import hygiene.

* tests/cuda_sim runs under numba's CUDA simulator, which must be switched on before
  numba.cuda is first imported: here it runs in its own process, and this test fails if
  anything there fails, errors or is skipped (or if nothing ran).
* The simulator runs kernel bodies as Python, so it cannot show that the kernels compile
  for a GPU: numba.cuda's compile_ptx (NVVM, no GPU needed) does, and the PTX is checked for
  what bit-exactness needs (no FMA, every call inlined).
"""

import os
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fp8kit

ROOT = Path(__file__).parents[1]


def run_simulator_suite(tmp_path, marker, path="tests/cuda_sim"):
    pytest.importorskip("numba_cuda")  # in the test extra
    report = tmp_path / "cuda_sim.xml"
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    cmd = [sys.executable, "-m", "pytest", path, "-p", "no:cacheprovider",
           "-q", "-m", marker, f"--junitxml={report}"]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False
    )
    log = (proc.stdout + proc.stderr)[-6000:]
    assert report.exists(), log
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["tests"] > 0, log
    assert counts["failures"] == counts["errors"] == 0, log
    assert counts["skipped"] == 0, f"simulator tests were skipped:\n{log}"
    assert proc.returncode == 0, log
    return counts


# one process per file, so that pytest-xdist can run them side by side (the simulator
# interprets every thread in Python: minutes per file)
SIM_FILES = sorted(p.name for p in (ROOT / "tests" / "cuda_sim").glob("test_sim_*.py"))


@pytest.mark.parametrize("name", SIM_FILES)
def test_simulator_suite(tmp_path, name):
    run_simulator_suite(tmp_path, "not slow", f"tests/cuda_sim/{name}")


def test_every_simulator_file_runs():
    assert "test_sim_fake_convert.py" in SIM_FILES and len(SIM_FILES) >= 7


@pytest.mark.slow
def test_simulator_suite_slow(tmp_path):
    run_simulator_suite(tmp_path, "slow")


def run_python(code: str, **env) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_cpu_calls_never_import_numba_cuda():
    out = run_python(
        """
        import sys
        import numpy as np
        import fp8kit
        x = np.linspace(-300, 300, 50, dtype=np.float32)
        fp8kit.encode(x, "float8_e4m3fn"); fp8kit.decode(np.arange(3, dtype=np.uint8), "bf16")
        fp8kit.round_to(x, "bfloat16"); fp8kit.cast(x, "float8_e5m2"); fp8kit.fake_convert(x, 2.0)
        fp8kit.astype(x, "float8_e4m3fn")
        print(sorted(m for m in sys.modules if m.startswith(("numba.cuda", "numba_cuda"))))
        """
    )
    assert out.strip() == "[]"


def test_works_without_numba_cuda_and_says_what_to_install():
    out = run_python(
        """
        import sys
        sys.modules["numba_cuda"] = None  # as if numba-cuda were not installed
        sys.modules["numba.cuda"] = None
        import numpy as np
        import fp8kit
        print(fp8kit.encode(np.float32([500.0]), "float8_e4m3fn"))

        class GpuArray:  # what fp8kit takes for a GPU array (CuPy, torch on CUDA)
            __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (0, False),
                                        "version": 3}
        try:
            fp8kit.encode(GpuArray(), "float8_e4m3fn")
        except ImportError as exc:
            print(exc)
        """
    )
    lines = out.strip().splitlines()
    assert lines[0] == "[126]"
    assert "numba-cuda" in lines[1] and "pip install 'numba-cuda[cu12]'" in lines[1]


def test_device_array_detection_without_numba_cuda():
    from fp8kit.codec import _on_device

    class CaiOnly:
        __cuda_array_interface__ = {}

    class Both(CaiOnly):
        __array_interface__ = {}

    class Numba:
        __cuda_ndarray__ = True

    assert _on_device(CaiOnly()) and _on_device(None, Numba())
    assert not _on_device(np.ones(3), Both(), [1.0], 2.0, None)


# ------------------------------------------------------------------------------- PTX
def _compile_ptx():
    """numba.cuda.compile_ptx, or a skip where NVVM/NVRTC are missing (the test extra
    installs them with numba-cuda[cu13])."""
    pytest.importorskip("numba_cuda")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("compile_ptx needs the real CUDA target, not the simulator")
    from numba import cuda, types

    def probe(x):
        x[0] = 1.0

    try:
        cuda.compile_ptx(probe, (types.float32[::1],), cc=CC)
    except Exception as exc:  # NVVM or NVRTC not found
        pytest.skip(f"NVVM/NVRTC not available ({type(exc).__name__}: {exc})"[:300])
    return cuda.compile_ptx


CC = (7, 5)  # the oldest compute capability CUDA 13 compiles for


def _arr(dtype):
    from numba import from_dtype

    return from_dtype(np.dtype(dtype))[::1]


def _ptx_of_encode(fmt, dtype, lookup):
    from fp8kit._kernels.codec import bits_dtype
    from fp8kit._kernels.tables import decode_table
    from fp8kit.cuda import _kernels

    fmt = fp8kit.get_format(fmt)
    kernel, _ = _kernels.encode_kernel(fmt, np.dtype(dtype), True, lookup)
    table = decode_table(fmt, np.dtype(dtype)).dtype if lookup else fmt.code_dtype
    sig = (_arr(bits_dtype(np.dtype(dtype))), _arr(table), _arr(table))
    return _compile_ptx()(kernel.py_func, sig, cc=CC)[0]


def _ptx_of_fake(dest, dtype, has_shift, openvino):
    from numba import from_dtype, types

    from fp8kit._kernels.codec import bits_dtype
    from fp8kit.cuda import _kernels

    b = bits_dtype(np.dtype(dtype))
    kernel = _kernels.fake_kernel(
        fp8kit.get_format(dest), np.dtype(dtype), has_shift, openvino, True, has_shift
    )
    sig = (_arr(b), _arr(b), _arr(b), from_dtype(b), from_dtype(b), *[types.int64] * 7, _arr(b))
    return _compile_ptx()(kernel.py_func, sig, cc=CC)[0]


def _float_ops(ptx):
    return set(re.findall(r"\b((?:fma|mul|add|sub|div)(?:\.\w+)*\.f(?:32|64))\b", ptx))


USER = fp8kit.FloatFormat(name="u_e11m4", exponent_bits=11, mantissa_bits=4, bias=1023)
ENCODE_PTX = [
    pytest.param("float8_e4m3fn", np.float32, False, id="e4m3fn-f32"),
    pytest.param("float8_e5m2fnuz", np.float64, True, id="e5m2fnuz-f64-round"),
    pytest.param("bfloat16", np.float16, False, id="bf16-f16"),
    pytest.param("float8_e4m3fn", ml_dtypes.bfloat16, True, id="e4m3fn-bf16-round"),
    pytest.param(USER, np.float32, False, id="e11m4-widened-f32"),
]


@pytest.mark.parametrize("fmt, dtype, lookup", ENCODE_PTX)
def test_encode_kernels_compile_for_a_gpu(fmt, dtype, lookup):
    ptx = _ptx_of_encode(fmt, dtype, lookup)
    assert ".entry" in ptx and "call" not in ptx  # every helper inlined
    ops = _float_ops(ptx)
    assert not {"fma.rn.f32", "fma.rn.f64", "mul.f32", "mul.f64"} & ops, ops


FAKE_PTX = [
    pytest.param("f8e4m3", np.float32, False, False, id="spec-f32"),
    pytest.param("float8_e5m2fnuz", np.float16, True, False, id="spec-f16-shift"),
    pytest.param("f8e5m2", np.float32, True, True, id="openvino-f32-shift"),
    pytest.param("f8e4m3", ml_dtypes.bfloat16, False, True, id="openvino-bf16"),
]


@pytest.mark.parametrize("dest, dtype, has_shift, openvino", FAKE_PTX)
def test_fake_convert_kernels_round_every_step_on_a_gpu(dest, dtype, has_shift, openvino):
    ptx = _ptx_of_fake(dest, dtype, has_shift, openvino)
    ops = _float_ops(ptx)
    assert "call" not in ptx
    # ptxas may fuse a mul.f32 and an add.f32 into an FMA (one rounding of x * s - h);
    # the explicitly rounded forms are never fused
    assert "mul.rn.f32" in ops and not {"mul.f32", "fma.rn.f32"} & ops, ops
    assert not any(op.startswith("div") and op != "div.rn.f32" for op in ops), ops


def test_user_kernel_with_device_functions_compiles_for_a_gpu():
    compile_ptx = _compile_ptx()
    from numba import cuda, types

    from fp8kit.cuda import device_functions

    enc, dec = device_functions("float8_e4m3fn")

    def kernel(x, codes, y):
        i = cuda.grid(1)
        if i < x.size:
            c = enc(x[i])
            codes[i] = c
            y[i] = dec(c)

    ptx, _ = compile_ptx(kernel, (types.float32[::1], types.uint8[::1], types.float32[::1]), cc=CC)
    assert "call" not in ptx and "fma" not in ptx


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                                 "float8_e5m2fnuz", "bfloat16", "float16", USER])  # fmt: skip
def test_every_encode_kernel_compiles_for_a_gpu(fmt):
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
        for lookup in (False, True):
            assert ".entry" in _ptx_of_encode(fmt, dtype, lookup)


@pytest.mark.slow
def test_every_fake_convert_kernel_compiles_for_a_gpu():
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
        for dest, openvino in (("f8e4m3", False), ("f8e5m2", True), ("float8_e4m3fnuz", False)):
            for has_shift in (False, True):
                assert "mul.f32" not in _ptx_of_fake(dest, dtype, has_shift, openvino)


def test_small_launches_do_not_warn_about_occupancy(monkeypatch):
    """On a GPU numba-cuda warns (NumbaPerformanceWarning) when a grid has fewer than 128
    blocks; fp8kit's launches of small arrays drop that warning, and only that one, and
    configure each grid once."""
    pytest.importorskip("numba_cuda")
    import warnings

    from fp8kit.cuda import _dispatch

    grids = []

    class Kernel:
        def __getitem__(self, grid):
            grids.append(grid)
            warnings.warn(
                "\x1b[1mGrid size 1 will likely result in GPU under-utilization due to low "
                "occupancy.\x1b[0m",
                UserWarning,
                stacklevel=2,
            )
            return lambda *args: grids.append(args)

    monkeypatch.setattr(_dispatch, "launch_config", lambda n: (1, 256))
    kernel = Kernel()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _dispatch._launch(kernel, 10, "x", "out")
        _dispatch._launch(kernel, 10, "y", "out")
    assert grids == [(1, 256), ("x", "out"), ("y", "out")]

    class Other:
        def __getitem__(self, grid):
            warnings.warn("something else", UserWarning, stacklevel=2)
            return lambda *args: None

    with pytest.warns(UserWarning, match="something else"):
        _dispatch._launch(Other(), 10)


@pytest.mark.parametrize(
    "fmt, dtype",
    [("float8_e4m3fn", np.float32), ("float8_e5m2", np.float16),
     ("float8_e4m3fnuz", ml_dtypes.bfloat16), ("float8_e5m2fnuz", np.float64)],
    ids=["f32", "f16", "bf16", "f64"],
)  # fmt: skip
def test_packed_encode_kernels_store_words_on_a_gpu(fmt, dtype):
    """The 8-bit encodes store four codes as one 32-bit word (byte stores ran at 2/3 of
    the copy rate on an H100); the leftover elements alone are stored as bytes."""
    from fp8kit._kernels.codec import bits_dtype
    from fp8kit.cuda import _kernels

    kernel = _kernels.encode_packed_kernel(fp8kit.get_format(fmt), np.dtype(dtype), True)
    sig = (_arr(bits_dtype(np.dtype(dtype))), _arr(np.uint32), _arr(np.uint8))
    ptx = _compile_ptx()(kernel.py_func, sig, cc=CC)[0]
    assert "call" not in ptx
    # (NVVM unrolls the loops, so the instructions are not counted)
    assert "st.global.u32" in ptx and "st.global.u8" in ptx, ptx


@pytest.mark.parametrize("table", [np.uint16, np.uint32, np.uint64])
def test_packed_decode_kernels_move_words_on_a_gpu(table):
    """Decoding 8-bit codes loads four codes as one 32-bit word and stores the values as
    64-bit words (one per four 16-bit values, two per four float32, four per four float64)."""
    from fp8kit.cuda import _kernels

    kernel = _kernels.lookup_packed_kernel(np.dtype(table))
    sig = (_arr(np.uint8), _arr(np.uint32), _arr(table), _arr(table), _arr(np.uint64))
    ptx = _compile_ptx()(kernel.py_func, sig, cc=CC)[0]
    assert "call" not in ptx
    assert "st.global.u64" in ptx and "ld.global.u32" in ptx, ptx
    if table == np.uint64:  # the code words are the only 32-bit loads
        assert (
            "ld.global.u32"
            not in _compile_ptx()(_kernels.lookup_kernel().py_func, sig[:1] + sig[2:4], cc=CC)[0]
        )


def test_matmul_kernel_compiles_for_a_gpu_without_fusing_inexact_products(monkeypatch):
    """The CUDA twin of matmul (fp8kit.cuda._mma) compiles for a GPU: its scalar code
    (fp8kit._kernels.mma.output and what it calls) has no numpy ufunc numba.cuda lacks,
    the inexact products are mul.rn (never fused into an FMA), divisions div.rn."""
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, types

    from fp8kit.cuda import _mma

    class Device:  # device functions that are not inlined ask the current device's cc
        compute_capability = (7, 5)

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: Device())
    f2, i2 = types.float64[:, ::1], types.int64[:, ::1]
    sig = (f2, i2, f2, i2, f2, f2, f2, types.int64[::1], f2, f2, f2, f2, f2)
    ptx, _ = cuda.compile_ptx(_mma.gemm_kernel().py_func, sig, cc=(7, 5))
    ops = set(re.findall(r"\b((?:fma|mul|add|sub|div|cvt)(?:\.\w+)*\.f(?:32|64))\b", ptx))
    assert {"mul.rn.f64", "mul.rn.f32"} <= ops, ops
    assert "div.rn.f64" in ops and not any(o.startswith("div") and ".rn" not in o for o in ops)
    for d_type, codes in (("f32", types.uint32), ("f16", types.uint16)):
        kernel = _mma.finish_kernel(d_type, True).py_func
        assert ".entry" in cuda.compile_ptx(kernel, (f2, codes[:, ::1]), cc=(7, 5))[0]
