"""GPU twins of fp8kit's kernels, compiled with numba.cuda (the only package that imports it).

``fp8kit.encode``, ``decode``, ``round_to``, ``cast`` and ``fake_convert`` run here when
given a GPU array (a numba device array or any ``__cuda_array_interface__`` object: CuPy,
torch), so importing this package is only needed for the extras:

* :func:`device_functions`: encode/decode one value inside your own ``@cuda.jit`` kernels;
* :func:`cast` with ``source=`` for float8/bfloat16 codes, and :func:`fake_convert` with
  ``bfloat16=True`` for bfloat16 bits, since device arrays have no such dtypes;
* :func:`is_device_array`: what fp8kit treats as a GPU array.

Results are bit for bit those of the CPU kernels (see docs/cuda.md).
"""

from __future__ import annotations

from typing import Any

try:
    import numba_cuda  # noqa: F401  (numba's built-in CUDA target is deprecated)
except ImportError as exc:
    raise ImportError(
        "fp8kit's GPU support needs numba-cuda: pip install 'numba-cuda[cu12]' (CUDA 12) or "
        "'numba-cuda[cu13]' (CUDA 13); from fp8kit's clone, pip install '.[cuda12]'"
    ) from exc

import numpy as np
from numba import njit

from .._kernels.bits import as_bits, as_float, cast_like, zero_of
from ..formats import FloatFormat, get_format
from . import _kernels
from ._dispatch import cast, fake_convert, is_device_array
from ._scalar import fmul_rn

__all__ = ["cast", "device_functions", "fake_convert", "is_device_array"]

_SPECIALS = {
    "ieee": 0,
    "fn": 1,
    "fnuz": 2,
    "signed_finite": 2,  # P3109: the codes of fnuz (saturation differs: encoding only)
    "extended": 3,  # P3109: NaN at the -0 code, +-Inf at the largest magnitude
    "unsigned_extended": 4,  # P3109: NaN all ones, +Inf below it, no sign
    "unsigned_finite": 5,  # P3109: NaN all ones, no sign
}
_LAYOUT = {np.dtype(np.float32): (32, 23, 127), np.dtype(np.float64): (64, 52, 1023)}


def _decode_params(fmt: FloatFormat, dtype: np.dtype):
    width, fm, fbias = _LAYOUT[dtype]
    m = fmt.mantissa_bits
    if fmt.minexp < 1 - fbias or fmt.maxexp - 1 > fbias or m > fm:
        raise ValueError(
            f"device_functions: {fmt.name} has values that {dtype} cannot hold exactly; "
            "use dtype=np.float64"
        )
    if fmt.specials not in _SPECIALS:
        raise ValueError(
            f"device_functions: {fmt.name} ({fmt.specials!r} specials) is not supported; "
            f"supported: {', '.join(_SPECIALS)}"
        )
    u = np.uint32 if width == 32 else np.uint64
    f = np.float32 if width == 32 else np.float64
    return (
        u(fmt.magnitude_mask),  # magnitude mask
        u(m),
        u((1 << m) - 1),
        u(fbias - fmt.bias),  # rebias (>= 0: fmt's normals are normals of dtype)
        u(fm),
        u(fm - m),
        f(2.0 ** (fmt.minexp - m)),  # subnormal step: fmt's subnormals are f * step, exact
        _SPECIALS[fmt.specials],
        u((1 << fmt.exponent_bits) - 1),  # all-ones exponent field
        u(fmt.sign_mask),
        u(((1 << (width - fm - 1)) - 1) << fm),  # Inf bits
        u(((1 << (width - fm)) - 1) << (fm - 1)),  # canonical quiet NaN bits
        u(fmt.bits - 1 if fmt.signed else fmt.bits),  # sign position (unsigned: none set)
        u(width - 1),  # sign position in dtype
        u(1),
    )


def device_functions(fmt: Any, saturate: bool = True, dtype: Any = np.float32):
    """``(encode_one, decode_one)`` for use inside your own ``@cuda.jit`` kernels.

    ``encode_one(x)`` rounds one float to the format and returns its code (uint8 for
    formats of up to 8 bits, else uint16), with exactly the bits of :func:`fp8kit.encode`;
    ``decode_one(code)`` returns the value of a code as ``dtype``, exactly (NaN codes give
    the canonical quiet NaN with the code's sign), as :func:`fp8kit.decode` does.  Both are
    Numba ``@njit`` functions: CUDA kernels compile them for the device, and they work on
    the CPU (and in the CUDA simulator) too.

    Parameters
    ----------
    fmt : str, FloatFormat or dtype
        The format.
    saturate : bool, default True
        As in :func:`fp8kit.encode`.
    dtype : np.float32 or np.float64
        The float type of the values: ``encode_one`` converts its argument to it (pass
        float32 values to the float32 version: a float64 would be rounded twice), and
        ``decode_one`` returns it.  float32 needs a format whose values float32 holds
        exactly (every built-in format).

    Returns
    -------
    tuple of two functions

    Raises
    ------
    ValueError
        Unknown format, or a format float32 cannot hold with ``dtype=np.float32``.
    TypeError
        If ``dtype`` is not float32 or float64, or saturate is not a bool.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit.cuda import device_functions
    >>> enc, dec = device_functions("float8_e4m3fn")
    >>> int(enc(np.float32(500.0))), float(dec(np.uint8(0x7E)))
    (126, 448.0)
    """
    from .._args import saturate as _saturate

    fmt = get_format(fmt, argname="fmt")
    sat = _saturate(saturate, "device_functions")
    dt = np.dtype(dtype)
    if dt not in _LAYOUT:
        raise TypeError(f"device_functions: dtype must be float32 or float64; got {dtype!r}")
    element, _ = _kernels.encode_element(fmt, dt, sat)
    d = _decode_params(fmt, dt)
    code_t = fmt.code_dtype.type
    float_t = dt.type

    @njit(inline="always", error_model="numpy")
    def encode_one(x):
        return code_t(element(as_bits(float_t(x))))

    @njit(inline="always", error_model="numpy")
    def decode_one(code):
        (mag_mask, m, mmask, rebias, fm, shift, step, specials, top, sign_mask, inf_bits,
         qnan, code_sign, sign_pos, one) = d  # fmt: skip
        c = cast_like(code, one)
        mag = cast_like(c & mag_mask, one)
        e = mag >> m
        f = cast_like(mag & mmask, one)
        normal = cast_like(((e + rebias) << fm) | (f << shift), one)
        sub = as_bits(fmul_rn(float_t(f), step))
        bits = sub if e == zero_of(one) else normal
        if specials == 0:
            bits = (inf_bits if f == zero_of(one) else qnan) if e == top else bits
        elif specials == 1:
            bits = qnan if mag == mag_mask else bits
        elif specials == 2:
            bits = qnan if c == sign_mask else bits
        elif specials == 3:
            bits = qnan if c == sign_mask else (inf_bits if mag == mag_mask else bits)
        elif specials == 4:
            top = cast_like(mag_mask - one, one)
            bits = qnan if mag == mag_mask else (inf_bits if mag == top else bits)
        else:
            bits = qnan if mag == mag_mask else bits
        sign = cast_like(((c >> code_sign) & one) << sign_pos, one)
        return as_float(cast_like(bits | sign, one))

    return encode_one, decode_one
