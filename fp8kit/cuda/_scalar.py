"""Scalar code that only the GPU kernels need, as Numba ``@njit`` functions.

numba.cuda compiles these (and the CPU kernels' helpers they call) for the device; under
the CUDA simulator and in tests they run compiled for the CPU.  Where a GPU computes
differently from the CPU, they say how the CPU's bits are rebuilt:

* float arithmetic: PTX ``mul.f32``/``add.f32`` may be fused into an FMA by ptxas; the
  ``*_rn`` intrinsics below never are.  Division is ``div.rn`` already (Numba does not
  enable fastmath).
* NaN results: a GPU gives one canonical NaN, x86 the first NaN operand made quiet (or
  0xFFC00000): :func:`fp8kit._kernels.bits.x86_nan` rebuilds the x86 bits.
* float conversions of NaN (float16 -> float32, float32 -> float64) are done on the bits,
  keeping the sign (and the payload where the CPU keeps it).
* float16 is widened by arithmetic instead of the CPU's 65,536-entry table.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._kernels.bits import (
    as_bits,
    as_float,
    cast_like,
    encode_fast,
    nvvm_rn,
    round_in_place,
    x86_nan,
)
from .._kernels.codec import _params
from .._kernels.fake import _KIND, BF16, F16, F32, OV_F32, _to16, ov_round16, round_params
from ..formats import FloatFormat, get_format

_ONE32 = np.uint32(1)
_NAN64 = np.uint64(0x7FF8000000000000)
_SIGN32 = np.uint32(0x80000000)


fmul_rn = nvvm_rn("mul")
fadd_rn = nvvm_rn("add")
fsub_rn = nvvm_rn("sub")


@njit(inline="always", error_model="numpy")
def f16_to_f32_bits(h):
    """float16 bits -> float32 bits, exact, NaN payload kept (as numpy's conversion)."""
    one = np.uint32(1)
    v = cast_like(h, one)
    sign = cast_like((v & np.uint32(0x8000)) << np.uint32(16), one)
    e = (v >> np.uint32(10)) & np.uint32(0x1F)
    m = v & np.uint32(0x3FF)
    special = sign | np.uint32(0x7F800000) | cast_like(m << np.uint32(13), one)
    # subnormal (or zero): m * 2**-24, exact in float32
    sub = sign | as_bits(fmul_rn(np.float32(m), np.float32(2.0**-24)))
    normal = sign | cast_like(((e + np.uint32(112)) << np.uint32(23)) | (m << np.uint32(13)), one)
    return cast_like(
        special if e == np.uint32(0x1F) else (sub if e == np.uint32(0) else normal), one
    )


@njit(inline="always", error_model="numpy")
def widen_bits(v):
    """float32 bits -> float64 bits, exact.  NaN gives the quiet NaN with its sign (all the
    codec reads of a NaN), not what a GPU's conversion gives (a canonical NaN, no sign)."""
    f = as_float(v)
    nan = cast_like(cast_like(v & _SIGN32, _NAN64) << np.uint64(32), _NAN64) | _NAN64
    return nan if f != f else as_bits(np.float64(f))


@njit(inline="always", error_model="numpy")
def load16(code, kind):
    """float32 value of data bits: float32 bits, or a float16/bfloat16 code (exact, NaN
    payload kept, as the CPU's table and shift give)."""
    if kind == F32:
        return as_float(cast_like(code, _ONE32))
    if kind == F16:
        return as_float(f16_to_f32_bits(code))
    return as_float(cast_like(cast_like(code, _ONE32) << 16, _ONE32))


@njit(inline="always", error_model="numpy")
def _store(f, kind, q16):
    """Twin of fp8kit._kernels.fake._store: round to the data type and back."""
    if kind == F32:
        return f
    return load16(_to16(f, kind, q16), kind)


def fake_element(fmt: FloatFormat, data_dtype: np.dtype, has_shift: bool, openvino: int):
    """``element(x, s, h)`` -> result bits: the GPU twin of the body of
    :func:`fp8kit._kernels.fake.fake_convert_kernel`, step for step, with each float
    operation rounded on its own (``*_rn``) and its NaN rebuilt as x86 gives it
    (``x86_nan``).  ``x``, ``s``, ``h``: bits of the data type (scale and shift too).
    """
    kind = _KIND[np.dtype(data_dtype).name]
    openvino = int(openvino)
    node = F32 if (openvino == OV_F32 and kind == F16) else kind  # as the CPU kernel's
    r8 = round_params(fmt)
    r16 = round_params(get_format("float16"))
    q16 = _params(get_format("float16"), "float32", False)[0]
    q = q16 if kind != BF16 else _params(get_format("bfloat16"), "float32", False)[0]
    mx = np.float32(fmt.max)
    one, zero = np.float32(1.0), np.float32(0.0)

    @njit(inline="always", error_model="numpy")
    def element(x, sb, hb):
        v, s, h = load16(x, kind), load16(sb, kind), load16(hb, kind)
        y = x86_nan(fmul_rn(v, s), v, s)
        if has_shift:
            y = x86_nan(fsub_rn(y, h), y, h)
        if openvino:
            y = -mx if y != y else (mx if y > mx else (-mx if y < -mx else y))
            y = _store(y, node, q16)
            y = as_float(ov_round16(as_bits(y), r16, openvino))
            qv = as_float(round_in_place(as_bits(y), r8))
            rr = x86_nan(one / s, one, s)
            if has_shift:
                rr = _store(rr, node, q16)
                neg = _store(x86_nan(fsub_rn(zero, h), zero, h), node, q16)
                av = x86_nan(fsub_rn(qv, neg), qv, neg)
                if av != av:
                    res = x86_nan(fadd_rn(av, av), av, av)
                else:
                    res = x86_nan(fmul_rn(av, rr), av, rr)
            else:
                res = x86_nan(fmul_rn(qv, rr), qv, rr)
            if kind == F32:
                return as_bits(res)
            return _to16(res, kind, q16)
        fq = as_float(round_in_place(as_bits(y), r8))
        if has_shift:
            fq = x86_nan(fadd_rn(fq, h), fq, h)
        res = x86_nan(fq / s, fq, s)
        if kind == F32:
            return as_bits(res)
        return cast_like(encode_fast(as_bits(res), q), _ONE32)

    return element
