"""Dense storage of sub-byte codes: two 4-bit codes per byte, four 6-bit codes per 3 bytes,
and generally ``n`` codes of ``b`` bits (3 to 7: the P3109 formats) in ``ceil(n * b / 8)``.

fp8kit keeps one code per byte (what ml_dtypes does, and what the kernels index); files and
devices store float4/int4 two per byte and float6 four per three bytes.  The bit order is
the one ONNX uses for its packed 4-bit types: codes fill the bytes from the least significant
bit up, element 0 first (so element 0 is the low nibble of byte 0), and a short last group
is padded with zero bits.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from . import _args, _backends
from .formats import FloatFormat

__all__ = ["pack", "unpack"]

# Integer types that pack like the 4-bit float formats (not FloatFormats).
_INT4 = {
    "int4": np.dtype(ml_dtypes.int4),
    "uint4": np.dtype(ml_dtypes.uint4),
}


def _width(fmt: Any, func: str) -> tuple[int, np.dtype | None]:
    """(bits per code, ml_dtypes dtype or None) of a format or int4/uint4."""
    fmt = _args.name_arg(fmt)
    if isinstance(fmt, str) and fmt.lower() in _INT4:
        return 4, _INT4[fmt.lower()]
    try:
        dt = np.dtype(fmt) if not isinstance(fmt, (str, FloatFormat)) else None
    except TypeError:
        dt = None
    if dt is not None and dt in _INT4.values():
        return 4, dt
    f = _args.format_arg(fmt)
    if not 3 <= f.bits <= 7:
        raise ValueError(
            f"{func}: fmt {f.name!r} has {f.bits}-bit codes; packing is for 3- to 7-bit codes "
            "(4-bit: float4, int4, uint4; 6-bit: float6; P3109 formats of 3 to 7 bits)"
        )
    return f.bits, f.dtype


def _pack_bits(flat: np.ndarray, bits: int, nbytes: int) -> np.ndarray:
    """Codes of any width as one little-endian bit stream (bit j of code i is bit
    ``i * bits + j`` of the stream, bit ``t`` of the stream bit ``t % 8`` of byte ``t // 8``)."""
    stream = ((flat[:, None] >> np.arange(bits, dtype=np.uint8)) & np.uint8(1)).reshape(-1)
    padded = np.zeros(8 * nbytes, np.uint8)
    padded[: stream.size] = stream
    return np.packbits(padded, bitorder="little")


def _unpack_bits(data: np.ndarray, bits: int, n: int) -> np.ndarray:
    stream = np.unpackbits(data, bitorder="little")[: n * bits].reshape(n, bits)
    weights = (np.uint8(1) << np.arange(bits, dtype=np.uint8)).astype(np.uint8)
    return (stream * weights).sum(axis=1, dtype=np.uint8)


def pack(codes: Any, fmt: Any) -> np.ndarray:
    """Pack sub-byte codes densely: 4-bit codes two per byte, 6-bit codes four per 3 bytes,
    ``b``-bit codes (b = 3..7) ``8`` per ``b`` bytes.

    Parameters
    ----------
    codes : array_like
        One code per element: unsigned integers below ``2**bits``, or an ml_dtypes array of
        the format (``float4_e2m1fn``, ``float6_e2m3fn``, ``float6_e3m2fn``, ``int4``,
        ``uint4``).  Any shape; packed in C order.
    fmt : str, FloatFormat or dtype
        A format of 3 to 7 bits (float4, float6, the P3109 formats of 3 to 7 bits), or
        ``"int4"``/``"uint4"``.

    Returns
    -------
    ndarray of uint8, 1-D
        ``ceil(n * bits / 8)`` bytes; element 0 occupies the lowest bits of byte 0 (the
        order of ONNX's packed 4-bit tensors), and unused high bits of the last byte are 0.

    Raises
    ------
    ValueError
        If fmt is not a 3- to 7-bit type, or a code does not fit its width.
    TypeError
        If codes are neither unsigned integers nor an array of the format's dtype.

    Examples
    --------
    >>> import numpy as np, fp8kit
    >>> fp8kit.pack(np.array([1, 2, 3], np.uint8), "float4_e2m1fn").tolist()
    [33, 3]
    >>> fp8kit.pack(np.array([1, 2, 3, 63], np.uint8), "float6_e2m3fn").tolist()
    [129, 48, 252]
    >>> fp8kit.pack(np.array([1, 2, 7], np.uint8), "p3109_k3p2se").tolist()  # 3-bit codes
    [209, 1]
    """
    kind = _backends.kind_of(codes)
    if kind != "numpy":
        return _backends.call(kind, "pack", pack, (codes, fmt), {})
    bits, dt = _width(fmt, "pack")
    arr = np.asarray(codes)
    if dt is not None and arr.dtype == dt:
        flat = arr.reshape(-1).view(np.uint8) & np.uint8((1 << bits) - 1)
    elif arr.dtype.kind == "u" or (arr.dtype.kind == "i" and arr.size == 0):
        if arr.size and int(arr.max()) >= 1 << bits:
            bad = int(np.argmax(arr.reshape(-1) >= (1 << bits)))
            raise ValueError(
                f"pack: codes[{bad}] = {int(arr.reshape(-1)[bad])} does not fit in {bits} bits"
            )
        flat = arr.reshape(-1).astype(np.uint8)
    else:
        want = "unsigned integer codes" + (f" or an array of dtype {dt}" if dt else "")
        raise TypeError(f"pack: codes must be {want}; got dtype {arr.dtype}")
    n = flat.size
    nbytes = math.ceil(n * bits / 8)
    if bits == 4:
        padded = np.zeros(2 * nbytes, np.uint8)
        padded[:n] = flat
        return padded[0::2] | (padded[1::2] << np.uint8(4))
    if bits != 6:
        return _pack_bits(flat, bits, nbytes)
    groups = math.ceil(n / 4)
    padded = np.zeros(4 * groups, np.uint8)
    padded[:n] = flat
    v0, v1, v2, v3 = padded[0::4], padded[1::4], padded[2::4], padded[3::4]
    out = np.empty((groups, 3), np.uint8)
    out[:, 0] = v0 | (v1 << np.uint8(6))
    out[:, 1] = (v1 >> np.uint8(2)) | (v2 << np.uint8(4))
    out[:, 2] = (v2 >> np.uint8(4)) | (v3 << np.uint8(2))
    return out.reshape(-1)[:nbytes]


def unpack(packed: Any, fmt: Any, shape: int | tuple[int, ...]) -> np.ndarray:
    """Unpack densely stored sub-byte codes (see :func:`pack`) to one code per byte.

    Parameters
    ----------
    packed : array_like of uint8
        The packed bytes (at least ``ceil(n * bits / 8)`` of them).
    fmt : str, FloatFormat or dtype
        A format of 3 to 7 bits, or ``"int4"``/``"uint4"``.
    shape : int or tuple of int
        Shape of the result; ``n`` is its number of elements.

    Returns
    -------
    ndarray
        An array of the format's ml_dtypes dtype (``float4_e2m1fn``, ``int4``, ...) of the
        given shape, or uint8 codes for a format without one (P3109, user formats).

    Raises
    ------
    ValueError
        If fmt is not a 3- to 7-bit type or there are too few bytes.
    TypeError
        If packed is not an array of uint8.

    Examples
    --------
    >>> import numpy as np, fp8kit
    >>> fp8kit.unpack(np.array([33, 3], np.uint8), "float4_e2m1fn", 3).tolist()
    [0.5, 1.0, 1.5]
    >>> fp8kit.unpack(np.array([0x9F], np.uint8), "int4", 2).tolist()
    [-1, -7]
    """
    kind = _backends.kind_of(packed)
    if kind != "numpy":
        return _backends.call(kind, "unpack", unpack, (packed, fmt, shape), {})
    bits, dt = _width(fmt, "unpack")
    data = np.asarray(packed)
    if data.dtype != np.uint8:
        raise TypeError(f"unpack: packed must be an array of uint8; got dtype {data.dtype}")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    n = math.prod(shape)
    need = math.ceil(n * bits / 8)
    data = data.reshape(-1)
    if data.size < need:
        raise ValueError(
            f"unpack: {n} codes of {bits} bits need {need} bytes; packed has {data.size}"
        )
    data = data[:need]
    if bits == 4:
        codes = np.empty(2 * need, np.uint8)
        codes[0::2] = data & np.uint8(0x0F)
        codes[1::2] = data >> np.uint8(4)
    elif bits != 6:
        codes = _unpack_bits(data, bits, n)
    else:
        groups = math.ceil(n / 4)
        full = np.zeros(3 * groups, np.uint8)
        full[:need] = data
        b0, b1, b2 = full[0::3], full[1::3], full[2::3]
        codes = np.empty((groups, 4), np.uint8)
        codes[:, 0] = b0 & np.uint8(0x3F)
        codes[:, 1] = (b0 >> np.uint8(6)) | ((b1 & np.uint8(0x0F)) << np.uint8(2))
        codes[:, 2] = (b1 >> np.uint8(4)) | ((b2 & np.uint8(0x03)) << np.uint8(4))
        codes[:, 3] = b2 >> np.uint8(2)
        codes = codes.reshape(-1)
    codes = codes[:n].reshape(shape)
    if dt is None:
        return codes
    if dt == _INT4["int4"]:  # ml_dtypes keeps int4 sign-extended in its byte
        return ((codes.view(np.int8) << 4) >> 4).view(dt)
    return codes.view(dt)
