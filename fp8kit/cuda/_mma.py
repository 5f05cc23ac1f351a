"""The GPU twin of the matrix-product kernels: one thread per output element.

The kernel body only indexes: each thread calls :func:`fp8kit._kernels.mma.output`, the
scalar function the CPU's generic kernel calls, which numba.cuda compiles as a device
function, with a per-thread scratch array in local memory.  So the GPU computes every model
the way the CPU's generic kernel does, step for step (the CPU's float32 fast kernel gives
those bits too: it is tested against the generic one).

What keeps the bits the same on the device (see :mod:`fp8kit._kernels.mma`):

* every multiplication of the fused models is exact (by a power of two, or of two short
  significands), so NVVM or ptxas fusing it with an addition into an FMA cannot change a
  bit; the inexact products (the exact sum's, the fp32 accumulators') are ``mul_rn``,
  which is PTX's never-fused ``mul.rn``;
* the roundings are explicit: conversions to float32 (``cvt.rn``), ``ftrunc``/``ffloor``/
  ``frint`` (``cvt.rzi``/``cvt.rmi``/``cvt.rni``), ``llvm.fma`` (``fma.rn``), and division
  is IEEE (``div.rn``; Numba enables no fastmath, so subnormals are kept);
* NaN: a GPU's arithmetic gives one canonical NaN where x86 gives the first NaN operand,
  so NaN outputs of the float64 values may carry other payload and sign bits than the
  CPU's; :func:`matmul_device` writes them as the D type's canonical NaN where the model
  does (as :func:`fp8kit.mma._engine.finish` does on the CPU).

The inputs are the arrays of :func:`fp8kit.mma._engine.prepare` (numpy arrays, copied to
the device here, or device arrays of the same dtypes and shapes).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
from numba import cuda, float64, njit

from .._kernels.bits import as_bits, cast_like
from .._kernels.mma import CANONICAL_NAN, P_MODEL, SCRATCH, output
from ..formats import get_format
from ._kernels import encode_element

#: Threads per block (a warp's worth or more of consecutive outputs along N).
THREADS = 128


def _simulated() -> bool:
    return bool(cuda.config.ENABLE_CUDASIM)


def _as_compiled_argument():
    """What the kernel applies to each array before passing it to Numba code.

    On a GPU, the identity.  Under the CUDA simulator a kernel body runs as Python and its
    array arguments are wrappers, which Numba's CPU functions cannot take: there it unwraps
    the numpy array (and the simulator runs :func:`output` compiled for the CPU, the very
    function the device compiles)."""
    if _simulated():
        return lambda x: x._ary  # (FakeWithinKernelCUDAArray -> FakeCUDAArray._ary)
    return njit(inline="always")(lambda x: x)


@functools.cache
def gemm_kernel():
    """Kernel ``(sa, ea, sb, eb, va, vb, c, p, scale_a, scale_b, gscale_a, gscale_b, out)``:
    ``out[m, n]`` is output (m, n) of the chained product, computed by thread (n, m) of a
    2-D grid; the arguments are those of :func:`fp8kit._kernels.mma.kernel` ("generic"), as
    matrices.  K is A's values' width (``sa`` is a placeholder for the accumulators that
    are not hardware, which run K in one step: with K = 0 there is no step and the output
    is c)."""
    plain = _as_compiled_argument()

    @cuda.jit
    def kernel(sa, ea, sb, eb, va, vb, c, p, scale_a, scale_b, gscale_a, gscale_b, out):
        n, m = cuda.grid(2)
        if m < out.shape[0] and n < out.shape[1]:
            buf = cuda.local.array(SCRATCH, float64)
            out[m, n] = output(
                plain(sa), plain(ea), plain(sb), plain(eb), plain(va), plain(vb),
                m, n, va.shape[1], c[m, n], plain(p), plain(scale_a), plain(scale_b),
                plain(gscale_a), plain(gscale_b), buf, p[P_MODEL],
            )  # fmt: skip

    return kernel


def _block(rows: int, cols: int) -> tuple[int, int]:
    """(threads along N, along M): THREADS in all, N's side the power of two from 8 to 32
    that covers the columns (few idle threads for narrow products)."""
    bx = 8 if cols <= 8 else (16 if cols <= 16 else 32)
    return bx, THREADS // bx


def _launch(kernel, grid, block, *args) -> None:
    with warnings.catch_warnings():
        # numba-cuda warns of low occupancy for grids under 128 blocks: here that is only
        # a small product, which the user sized (as fp8kit.cuda._dispatch._configured)
        warnings.filterwarnings("ignore", message=r".*Grid size \d+ will likely result")
        configured = kernel[grid, block]
    configured(*args)


def gemm_device(sa, ea, sb, eb, va, vb, c, params, scale_a, scale_b, gscale_a, gscale_b, out):
    """Queue the product on the GPU: ``out`` (an M x N float64 device array) receives the
    float64 outputs.  The other arguments are the arrays of a
    :class:`fp8kit.mma._engine.Prepared`, as device arrays (numpy arrays are copied by
    numba.cuda, and back: pass device arrays)."""
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    bx, by = _block(rows, cols)
    grid = (-(-cols // bx), -(-rows // by))
    _launch(gemm_kernel(), grid, (bx, by), sa, ea, sb, eb, va, vb, c, params, scale_a,
            scale_b, gscale_a, gscale_b, out)  # fmt: skip
    return out


# ------------------------------------------------------------------------------- results
_D_TYPES = {"f32": (np.float32, np.uint32), "f16": (np.float16, np.uint16)}


@functools.cache
def finish_kernel(d_type: str, canonical_nan: bool):
    """Kernel ``(values, out)``: the float64 outputs (values of the D type, exactly) as the
    D type's bits, NaN as its canonical NaN (``0x7FFFFFFF``, ``0x7FFF``) where
    ``canonical_nan``; :func:`fp8kit.mma._engine.finish` on the GPU.  float16 bits come
    from the codec's float16 encoding (exact here: every value is a float16's)."""
    to16 = d_type == "f16"
    enc16, _ = encode_element(get_format("float16"), np.dtype(np.float64), False)
    nan32, nan16 = CANONICAL_NAN[4], CANONICAL_NAN[2]
    plain = _as_compiled_argument()

    @njit(inline="always")
    def bits_of(v):
        if to16:
            if canonical_nan and v != v:
                return nan16
            return cast_like(enc16(as_bits(v)), nan16)
        if canonical_nan and v != v:
            return nan32
        return as_bits(np.float32(v))

    @cuda.jit
    def kernel(values, out):
        n, m = cuda.grid(2)
        if m < out.shape[0] and n < out.shape[1]:
            out[m, n] = bits_of(plain(values)[m, n])

    return kernel


def finish_device(values, d_type: str, canonical_nan: bool):
    """The float64 device array ``values`` as a device array of the D type (``"f32"``,
    ``"f16"``, ``"f64"``: ``values`` itself), NaN canonical where ``canonical_nan``."""
    if d_type == "f64":
        return values
    dtype, bits = _D_TYPES[d_type]
    rows, cols = values.shape
    out = cuda.device_array((rows, cols), bits)
    if rows and cols:
        bx, by = _block(rows, cols)
        grid = (-(-cols // bx), -(-rows // by))
        _launch(finish_kernel(d_type, bool(canonical_nan)), grid, (bx, by), values, out)
    return out.view(dtype)


# ------------------------------------------------------------------------------- entries
def _on_device(a):
    if isinstance(a, np.ndarray):
        return cuda.to_device(np.ascontiguousarray(a))
    return a


def matmul_device(prep, d_type: str = "f64", canonical_nan: bool = False):
    """The product of a :class:`fp8kit.mma._engine.Prepared` on the GPU, as a device array.

    ``prep`` comes from ``_engine.prepare(..., fast=False)`` (the scalar kernel's arrays);
    its numpy arrays are copied to the device (device arrays are used as they are).
    With the defaults the result is the M x N float64 outputs, the values
    :func:`fp8kit.mma._engine.launch` returns on the CPU; with a D type (``"f32"``,
    ``"f16"``, ``"f64"``) and ``canonical_nan``, what ``_engine.finish`` makes of them,
    bit for bit.  Only queues kernels: nothing is copied back."""
    if prep.fast is not None:
        raise ValueError(
            "matmul_device: prep holds the CPU fast kernel's arrays; build it with "
            "fp8kit.mma._engine.prepare(..., fast=False)"
        )
    m, n = prep.c.shape
    out = cuda.device_array((m, n), np.float64)
    arrays = (prep.sa, prep.ea, prep.sb, prep.eb, prep.va, prep.vb, prep.c, prep.params,
              prep.scale_a, prep.scale_b, prep.gscale_a, prep.gscale_b)  # fmt: skip
    gemm_device(*(_on_device(a) for a in arrays), out)
    return finish_device(out, d_type, canonical_nan)


def launch_device(prep) -> np.ndarray:
    """:func:`fp8kit.mma._engine.launch` on the GPU: the float64 outputs, on the host."""
    return matmul_device(prep).copy_to_host()


def to_host(x, dtype=None) -> np.ndarray:
    """A GPU array's data as a numpy array (a copy), for preparing a product on the host.

    ``dtype``: an ml_dtypes dtype (float8, bfloat16, ...) to view integer codes as (device
    arrays hold such data as their codes), or None.  numpy arrays pass through."""
    if isinstance(x, np.ndarray):
        a = x
    else:
        d = x if getattr(type(x), "__cuda_ndarray__", False) else cuda.as_cuda_array(x)
        a = d.copy_to_host()
    if dtype is not None and a.dtype != np.dtype(dtype):
        if a.dtype.kind in "ui" and a.dtype.itemsize == np.dtype(dtype).itemsize:
            a = a.view(dtype)
    return a


def to_device(x: np.ndarray):
    """A host result as a new device array: float16/32/64 as themselves, ml_dtypes types
    (bfloat16, float8) as their integer codes, as fp8kit's GPU functions return them."""
    a = np.ascontiguousarray(x)
    if a.dtype.type.__module__ == "ml_dtypes":
        a = a.view(f"u{a.dtype.itemsize}")
    return cuda.to_device(a)
