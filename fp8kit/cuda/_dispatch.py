"""Device-array versions of fp8kit's public functions.

``fp8kit.encode`` and the others call these when an argument is a GPU array.  Everything
stays on the device: inputs are wrapped without copying (``numba.cuda.as_cuda_array``),
results are new numba device arrays (or ``out``), and no call reads device memory from the
host, so a call only queues kernels.  Float8 and bfloat16 results are their uint8/uint16
codes: device array libraries have no such dtypes.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import ml_dtypes
import numpy as np
from numba import cuda

from .. import _args
from .._args import FORMAT_DTYPES as _FORMAT_DTYPES
from .._args import destination as _destination
from .._args import merge as _merge
from .._args import on_device as _on_device
from .._args import openvino_variant, rounds_in_place
from .._args import rounding as _rounding
from .._args import saturate as _saturate
from .._casttypes import _cast_rules, cast_type
from .._kernels.codec import FLOAT_DTYPES, bits_dtype
from .._kernels.rounding import NEAREST_EVEN, is_stochastic
from .._kernels.tables import decode_table
from ..formats import FloatFormat, get_format
from . import _kernels

_F16 = np.dtype(np.float16)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_F32 = np.dtype(np.float32)
_FLOAT_NAMES = "float16, float32, float64 (or bfloat16 as an ml_dtypes device array)"
_NO_COPY = "fp8kit does not copy between host and device"


# ------------------------------------------------------------------------------- arrays
def _simulated() -> bool:
    return bool(cuda.config.ENABLE_CUDASIM)


def is_device_array(x: Any) -> bool:
    """Whether fp8kit treats ``x`` as a GPU array (and runs the GPU kernels on it).

    numba.cuda's device arrays (also the CUDA simulator's) and any object with
    ``__cuda_array_interface__`` but no host ``__array_interface__`` (CuPy arrays, torch CUDA
    tensors).  numpy arrays, including numba's mapped and managed arrays, are host arrays.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit.cuda import is_device_array
    >>> is_device_array(np.ones(3)), is_device_array([1.0])
    (False, False)
    """
    return _on_device(x)


def _device(x: Any, argname: str, func: str):
    """``x`` as a numba device array (no copy), or a TypeError for host data."""
    if getattr(type(x), "__cuda_ndarray__", False) and not isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__cuda_array_interface__") and not isinstance(x, np.ndarray):
        return cuda.as_cuda_array(x)
    raise TypeError(
        f"{func}: {argname} is a host object ({type(x).__name__}) but the data is on the GPU; "
        f"move it there first, e.g. numba.cuda.to_device({argname}) ({_NO_COPY})"
    )


def _order(d, argname: str, func: str) -> str:
    if d.ndim <= 1 or d.is_c_contiguous():
        return "C"
    if d.is_f_contiguous():
        return "F"
    raise ValueError(
        f"{func}: {argname} is not contiguous (shape {tuple(d.shape)}, strides "
        f"{tuple(d.strides)}); the GPU kernels need C- or F-contiguous arrays: make a "
        "contiguous copy first (cupy.ascontiguousarray, torch's .contiguous())"
    )


def _flat(d, order: str, dtype=None):
    """1-D view of a contiguous device array in memory order, optionally as another dtype
    of the same item size."""
    if d.ndim == 0:
        d = d.reshape(1)
    elif d.ndim > 1:
        d = d.ravel(order=order)
    return d if dtype is None else _view(d, dtype)


def _view(d, dtype):
    """``d.view(dtype)`` for a dtype of the same item size, 0-d arrays included."""
    dtype = np.dtype(dtype)
    if dtype == d.dtype:
        return d
    if d.ndim == 0 and not _simulated():
        # numba-cuda's view() hands a 0-d array's strides on as a list, which fails
        return type(d)(shape=(), strides=(), dtype=dtype, gpu_data=d.gpu_data, stream=d.stream)
    return d.view(dtype)


def _words(d, word: type):
    """The first ``d.size * itemsize // word`` bytes of the 1-D array ``d`` as an array of
    ``word`` (np.uint32 or np.uint64), or None where its address is not a multiple of the
    word's size (the packed kernels would then fault on a misaligned access)."""
    size = np.dtype(word).itemsize
    if _address(d)[0] % size:
        return None
    whole = d.size * d.dtype.itemsize // size * size // d.dtype.itemsize
    return d[:whole].view(word)


def _address(d) -> tuple[int, int]:
    """(first byte, one past the last byte) of a contiguous device array."""
    iface = getattr(d, "__cuda_array_interface__", None) or d.__array_interface__
    start = int(iface["data"][0] or 0)
    return start, start + d.size * d.dtype.itemsize


def _empty(shape, dtype, order: str = "C"):
    return cuda.device_array(tuple(shape), dtype=np.dtype(dtype), order=order)


def _check_out(out, shape, allowed: tuple[np.dtype, ...], order: str, func: str):
    d = _device(out, "out", func)
    if d.dtype not in allowed:
        names = ", ".join(str(a) for a in allowed)
        raise TypeError(f"{func}: out has dtype {d.dtype}; allowed: {names}")
    if tuple(d.shape) != tuple(shape):
        raise ValueError(
            f"{func}: out has shape {tuple(d.shape)} but x has {tuple(shape)}; on the GPU out "
            "must have x's shape (no broadcasting)"
        )
    if d.size > 1 and _order(d, "out", func) != order:
        raise ValueError(f"{func}: out must have x's memory layout ({order}-contiguous)")
    return d


def _separate(x, out, order: str):
    """x, copied on the device if it overlaps ``out`` other than exactly (elementwise
    kernels are safe in place, not on partially overlapping memory)."""
    (a0, a1), (b0, b1) = _address(x), _address(out)
    if a0 < b1 and b0 < a1 and not (a0 == b0 and x.dtype.itemsize == out.dtype.itemsize):
        copy = _empty(x.shape, x.dtype, order)
        copy.copy_to_device(x)
        return copy
    return x


# ------------------------------------------------------------------------------- launching
_THREADS = 256

# Arrays of at least this many elements take the packed 8-bit kernels (four elements per
# thread and step, 32/64-bit words in memory).  Their word views of the arrays cost host
# time (numba-cuda builds each device array in Python), which pays only where the kernel is
# long: on an H100, float32 -> float8_e4m3fn took 0.415 ms (one element per thread) and
# 0.433 ms (packed) a call for 64M elements, 0.783 and 0.634 ms for 268M; decoding to
# float32 0.776 and 0.748 ms for 268M.
PACKED_MIN = 1 << 27


def launch_config(n: int) -> tuple[int, int]:
    """(blocks, threads per block) for ``n`` elements: 256 threads per block, one element per
    thread up to 32 blocks per multiprocessor, grid-stride loops beyond.  The simulator runs
    every thread as a Python thread, so there it is at most 4 blocks of 32."""
    if _simulated():
        threads, max_blocks = 32, 4
    else:
        threads, max_blocks = _THREADS, 32 * _multiprocessors()
    return max(1, min(math.ceil(n / threads), max_blocks)), threads


_SM_COUNT: dict[int, int] = {}


def _multiprocessors() -> int:
    device = cuda.get_current_device()
    if device.id not in _SM_COUNT:
        _SM_COUNT[device.id] = int(device.MULTIPROCESSOR_COUNT)
    return _SM_COUNT[device.id]


def _launch(kernel, n: int, *args) -> None:
    if n:
        _configured(kernel, *launch_config(n))(*args)


@functools.lru_cache(maxsize=1024)
def _configured(kernel, blocks: int, threads: int):
    """``kernel[blocks, threads]``, made once per grid (the object costs microseconds).

    numba-cuda warns (NumbaPerformanceWarning) when a grid has fewer than 128 blocks; for
    fp8kit's launches that only means a small array, sized by fp8kit, which the user
    cannot change: the warning is noise to them, so it is dropped here, for these launches
    alone."""
    with warnings.catch_warnings():
        # (numba-cuda's own warning class, not numba's; its message starts with a colour code)
        warnings.filterwarnings("ignore", message=r".*Grid size \d+ will likely result")
        return kernel[blocks, threads]


_TABLES: dict[tuple, tuple] = {}


def _device_table(fmt: FloatFormat, dtype: np.dtype):
    """The decode table of (fmt, dtype) in device memory, copied once per CUDA context."""
    ctx = cuda.current_context()
    key = (id(ctx), fmt, np.dtype(dtype))
    if key not in _TABLES:
        # holding ctx keeps its id from being reused by a later context
        _TABLES[key] = (ctx, cuda.to_device(decode_table(fmt, np.dtype(dtype))))
    return _TABLES[key][1]


# ------------------------------------------------------------------------------- the codec
def _float_input(x, func: str, *, allow_codes_of: bool):
    """(device array, its float dtype or the format of its ml_dtypes dtype)."""
    d = _device(x, "x", func)
    dt = d.dtype
    if dt in FLOAT_DTYPES:
        return d, None
    if allow_codes_of and dt in _FORMAT_DTYPES:
        return d, _FORMAT_DTYPES[dt]
    hint = ""
    if dt.kind in "ui":
        hint = (
            "; on the GPU float8/bfloat16 data are held as integer codes: decode them first "
            "(fp8kit.decode(codes, fmt))"
        )
    raise TypeError(f"{func}: x must have dtype {_FLOAT_NAMES}; got {dt}{hint}")


def _mode_kernel(fmt, dt, sat, rounding, seed, random_bits, order, lookup, func, flush=(0, 0)):
    """The kernel and its extra arguments for a rounding mode (None for nearest-even
    without flush options); ``flush``: (flush_subnormals, flush_subnormal_inputs)."""
    mode, key, rbits = _rounding(rounding, seed, random_bits, func)
    ftz = _args.flag(flush[0], "flush_subnormals", func)
    daz = _args.flag(flush[1], "flush_subnormal_inputs", func)
    if mode == NEAREST_EVEN and not ftz and not daz:
        return None, ()
    if is_stochastic(mode) and order != "C":
        raise ValueError(
            f"{func}: rounding={rounding!r} on the GPU needs C-contiguous arrays (random "
            "words are counted by C-order index); make a C-contiguous copy first"
        )
    kernel, _ = _kernels.encode_mode_kernel(fmt, dt, sat, mode, rbits, lookup, ftz, daz)
    return kernel, (np.uint32(key[0]), np.uint32(key[1]))


def encode(
    x: Any,
    fmt: Any,
    *,
    saturate: bool = True,
    out: Any = None,
    rounding: str = "nearest_even",
    seed: Any = None,
    random_bits: int = 16,
    flush_subnormals: bool = False,
    flush_subnormal_inputs: bool = False,
):
    """``fp8kit.encode`` for device arrays: returns a uint8/uint16 device array of codes."""
    fmt = get_format(fmt, argname="fmt")
    sat = _saturate(saturate, "encode", propagate=True)
    d, own = _float_input(x, "encode", allow_codes_of=True)
    if own is not None:  # ml_dtypes float8 data: widening to float32 is exact
        if flush_subnormal_inputs is True and own.mantissa_bits > 0:
            raise ValueError(
                "encode: flush_subnormal_inputs=True on the GPU takes float16, bfloat16, "
                "float32 or float64 data, not float8 codes"
            )
        d = decode(d, own, dtype=np.float32)
    order = _order(d, "x", "encode")
    code_dtype = fmt.code_dtype
    if out is not None:
        allowed = (code_dtype,) + ((fmt.dtype,) if fmt.dtype is not None else ())
        target = _check_out(out, d.shape, allowed, order, "encode")
        d = _separate(d, target, order)
    else:
        target = _empty(d.shape, code_dtype, order)
    flush = (flush_subnormals, flush_subnormal_inputs)
    mk, extra = _mode_kernel(
        fmt, d.dtype, sat, rounding, seed, random_bits, order, False, "encode", flush
    )
    xb = _flat(d, order, bits_dtype(d.dtype))
    ob = _flat(target, order, code_dtype)
    packed = None
    if mk is None and code_dtype.itemsize == 1 and d.size >= PACKED_MIN:
        packed = _words(ob, np.uint32)
    if packed is not None:
        kernel = _kernels.encode_packed_kernel(fmt, d.dtype, sat)
        _launch(kernel, -(-d.size // 4), xb, packed, ob)
    else:
        kernel = mk or _kernels.encode_kernel(fmt, d.dtype, sat, False)[0]
        _launch(kernel, d.size, xb, ob, ob, *extra)  # (the table argument is unused here)
    return out if out is not None else target


def decode(codes: Any, fmt: Any = None, *, dtype: Any = None, out: Any = None):
    """``fp8kit.decode`` for device arrays (bfloat16 results as uint16 bits)."""
    fmt = None if fmt is None else get_format(fmt, argname="fmt")
    d = _device(codes, "codes", "decode")
    dt = d.dtype
    if dt in _FORMAT_DTYPES:
        own = _FORMAT_DTYPES[dt]
        if fmt is not None and fmt != own:
            raise ValueError(f"decode: codes have dtype {dt} but fmt is {fmt.name!r}")
        fmt = own
        d = _view(d, own.code_dtype)
    elif fmt is None:
        raise TypeError(f"decode: fmt is required for codes of dtype {dt}")
    elif dt != fmt.code_dtype:
        raise TypeError(
            f"decode: on the GPU codes of {fmt.name} must have dtype {fmt.code_dtype}; got {dt} "
            "(other integer dtypes would need a range check on the host)"
        )
    if dtype is None:
        dtype = _device(out, "out", "decode").dtype if out is not None else np.float32
    out_dt = _result_float(dtype, "decode")
    order = _order(d, "codes", "decode")
    table_dt = bits_dtype(out_dt)
    if out is not None:
        allowed = (out_dt, table_dt) if out_dt == _BF16 else (out_dt,)
        target = _check_out(out, d.shape, allowed, order, "decode")
        d = _separate(d, target, order)
    else:
        target = _empty(d.shape, table_dt if out_dt == _BF16 else out_dt, order)
    table = _device_table(fmt, out_dt)
    codes, values = _flat(d, order), _flat(target, order, table_dt)
    codes4 = None
    if codes.dtype.itemsize == 1 and d.size >= PACKED_MIN:
        codes4 = _words(codes, np.uint32)
    values8 = None if codes4 is None else _words(values, np.uint64)
    if values8 is not None:
        kernel = _kernels.lookup_packed_kernel(np.dtype(table_dt))
        _launch(kernel, -(-d.size // 4), codes, codes4, table, values, values8)
    else:
        _launch(_kernels.lookup_kernel(), d.size, codes, table, values)
    return out if out is not None else target


def _result_float(dtype: Any, func: str) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(
            f"{func}: dtype must be float16, bfloat16, float32 or float64; got {dtype!r}"
        ) from None
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"{func}: dtype must be float16, bfloat16, float32 or float64; got {dt}")
    return dt


def round_to(
    x: Any,
    fmt: Any,
    *,
    saturate: bool = True,
    out: Any = None,
    rounding: str = "nearest_even",
    seed: Any = None,
    random_bits: int = 16,
    flush_subnormals: bool = False,
    flush_subnormal_inputs: bool = False,
):
    """``fp8kit.round_to`` for device arrays."""
    fmt = get_format(fmt, argname="fmt")
    sat = _saturate(saturate, "round_to", propagate=True)
    d, _ = _float_input(x, "round_to", allow_codes_of=False)
    order = _order(d, "x", "round_to")
    dt = d.dtype
    if out is not None:
        target = _check_out(out, d.shape, (dt,), order, "round_to")
        d = _separate(d, target, order)
    else:
        target = _empty(d.shape, dt, order)
    flush = (flush_subnormals, flush_subnormal_inputs)
    mk, extra = _mode_kernel(
        fmt, dt, sat, rounding, seed, random_bits, order, True, "round_to", flush
    )
    kernel = mk or _kernels.encode_kernel(fmt, dt, sat, True)[0]
    bits = bits_dtype(dt)
    _launch(
        kernel,
        d.size,
        _flat(d, order, bits),
        _device_table(fmt, dt),
        _flat(target, order, bits),
        *extra,
    )
    return out if out is not None else target


def astype(x: Any, fmt: Any, *, saturate: bool = True):
    raise TypeError(
        "astype: GPU arrays cannot have ml_dtypes dtypes such as float8_e4m3fn; use "
        "fp8kit.encode(x, fmt) for the uint8/uint16 codes on the device"
    )


# ------------------------------------------------------------------------------- cast
_SMALL = ("float16", "bfloat16")


def cast(x: Any, to: Any, *, saturate: bool = True, source: Any = None, rules: Any = "conformance"):
    """:func:`fp8kit.cast` for GPU arrays, including float8/bfloat16 codes.

    The casts from or to float8, bfloat16 and float16 among float types, composed of the
    codec's steps exactly as on the CPU, so the bits are those of :func:`fp8kit.cast`
    under the same ``rules``.  ``fp8kit.cast`` calls this for GPU arrays; call it directly
    to pass ``source``.

    Parameters
    ----------
    x : GPU array
        float16, float32 or float64 data, an ml_dtypes float8/bfloat16 numba device array,
        or uint8/uint16 codes of the format named by ``source``.
    to : dtype or str
        float8 formats, bfloat16, float16, float32 or float64 (as for :func:`fp8kit.cast`).
    saturate : bool, default True
        As for :func:`fp8kit.cast` (float8 destinations).
    source : str, optional
        The format of ``x``'s codes: a float8 format, ``"bfloat16"`` or ``"float16"``.
    rules : str or iterable of str, default "conformance"
        As for :func:`fp8kit.cast`.  Two of them change these casts: ``"fnuz-inf-nan"``
        (+-Inf into a FNUZ float8 type with saturate gives NaN, not +-max) and
        ``"round-once"`` (float64 rounded once, not through float32); ``"legacy"`` has both.
        The others concern integer, string and float4 casts, which the GPU does not do.

    Returns
    -------
    numba device array
        float16/float32/float64 values, or uint8/uint16 codes for float8 and bfloat16.

    Raises
    ------
    TypeError
        For host arrays, integer or string types, a plain float32/float64 conversion, or
        codes without ``source``.
    ValueError
        For an unknown type or ``rules`` name, or a ``source`` that is not float8,
        bfloat16 or float16.

    Examples
    --------
    >>> import numpy as np
    >>> from numba import cuda  # doctest: +SKIP
    >>> import fp8kit.cuda
    >>> codes = cuda.to_device(np.array([0x38, 0x7E, 0x7F], np.uint8))  # doctest: +SKIP
    >>> y = fp8kit.cuda.cast(codes, "float32", source="float8_e4m3fn")  # doctest: +SKIP
    >>> y.copy_to_host()  # doctest: +SKIP
    array([  1., 448.,  nan], dtype=float32)

    (The examples need a GPU or numba's CUDA simulator; the simulator tests run them.)
    """
    dst = cast_type(to)
    sat = _saturate(saturate, "cast")
    how = _cast_rules(rules, sat)
    d = _device(x, "x", "cast")
    if source is not None:
        src = cast_type(source, argname="source")
        if not (src.is_float8 or src.name in _SMALL):
            raise ValueError(
                f"cast: source must be a float8 format, bfloat16 or float16; got {src.name}"
            )
        fmt = get_format(src.name)
        if d.dtype not in (fmt.code_dtype, src.dtype):
            raise TypeError(
                f"cast: codes of {src.name} must have dtype {fmt.code_dtype}; got {d.dtype}"
            )
    elif d.dtype.kind == "f" or d.dtype in _FORMAT_DTYPES:
        src = cast_type(d.dtype, argname="x")
    else:
        raise TypeError(
            f"cast: on the GPU x must be float16, float32 or float64 data, or codes with "
            f"source= naming their format (e.g. fp8kit.cuda.cast(codes, to, "
            f"source='float8_e4m3fn')); got dtype {d.dtype}"
        )
    if not (src.is_cast21 and dst.is_cast21):
        raise ValueError(
            f"cast: on the GPU, cast knows the Cast-21 types only; got {src.name} -> "
            f"{dst.name} (cast on the host, or use fp8kit.encode/decode, which take every "
            "format on the GPU)"
        )
    if dst.kind != "float" or not (
        src.is_float8 or dst.is_float8 or src.name in _SMALL or dst.name in _SMALL
    ):
        raise TypeError(
            f"cast: the GPU does the casts from or to float8, bfloat16 and float16; got "
            f"{src.name} -> {dst.name} (cast on the host, or use your array library)"
        )
    # The CPU's composition (fp8kit.cast): widen float8/bfloat16/float16 to float32
    # exactly, then encode (float8: saturate; bfloat16/float16: IEEE overflow), or decode.
    if src.name in ("float32", "float64"):
        wide = d
    else:
        wide = decode(d, src.name, dtype=np.float32)
    # Cast's default (fp8kit.cast's _through_float32 and _float_to_float): float64 reaches
    # float16, bfloat16 and float8 through float32; +-Inf into a FNUZ type with saturate
    # gives +-max
    to32 = wide.dtype == np.float64 and (dst.is_float8 or dst.name in _SMALL)
    to32 = to32 and not how.round_once
    fmt = get_format(dst.name) if dst.is_float8 else None
    fnuz = fmt is not None and sat and fmt.specials == "fnuz" and not how.fnuz_inf_nan
    if to32 or fnuz:
        order = _order(wide, "x", "cast")
        ready = _empty(wide.shape, np.float32 if to32 else wide.dtype, order)
        kernel = _kernels.prepare_kernel(to32, float(fmt.max) if fnuz else 0.0)
        _launch(kernel, wide.size, _flat(wide, order), _flat(ready, order))
        wide = ready
    if dst.is_float8:
        return encode(wide, dst.name, saturate=sat)
    if dst.name in _SMALL:
        codes = encode(wide, dst.name, saturate=False)
        return codes.view(np.float16) if dst.name == "float16" else codes
    return wide if dst.name == "float32" else decode(d, src.name, dtype=dst.dtype)


# ------------------------------------------------------------------------------- FakeConvert
def _operand(value: Any, data_dtype: np.dtype, bits: np.dtype, argname: str):
    """(device array of bits or None, value bits or None, shape) of scale or shift."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return None, np.asarray(value, dtype=data_dtype).view(bits)[()], ()
    if is_device_array(value):
        d = _device(value, argname, "fake_convert")
        if d.dtype not in (data_dtype, bits) or (d.dtype == bits and data_dtype != _BF16):
            raise TypeError(
                f"fake_convert: {argname} has dtype {d.dtype} but data has {data_dtype}; "
                f"FakeConvert requires {argname} of the same type as data (or a Python number)"
            )
        return d, None, tuple(d.shape)
    arr = np.asarray(value)
    if arr.ndim:
        raise TypeError(
            f"fake_convert: {argname} is a host array (shape {arr.shape}) but data is on the "
            f"GPU; move it with numba.cuda.to_device({argname}) ({_NO_COPY}), or pass a "
            "Python number"
        )
    if arr.dtype != data_dtype:
        raise TypeError(
            f"fake_convert: {argname} has dtype {arr.dtype} but data has {data_dtype}; "
            f"FakeConvert requires {argname} of the same type as data (or a Python number)"
        )
    return None, arr.view(bits)[()], ()


def _element_strides(d, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides in elements of a device array broadcast (numpy-style) to ``shape``."""
    off = len(shape) - d.ndim
    item = d.dtype.itemsize
    return tuple(
        0 if i < off or d.shape[i - off] == 1 else d.strides[i - off] // item
        for i in range(len(shape))
    )


def fake_convert(
    data: Any,
    scale: Any,
    shift: Any = None,
    destination_type: Any = "f8e4m3",
    *,
    mode: str = "spec",
    out: Any = None,
    bfloat16: bool = False,
):
    """:func:`fp8kit.fake_convert` for GPU arrays, including bfloat16 bits.

    ``fp8kit.fake_convert`` calls this for GPU arrays; call it directly for ``bfloat16``.
    The bits are those of the CPU kernel in both modes.

    Parameters
    ----------
    data : GPU array
        float32 or float16 data (or an ml_dtypes bfloat16 numba device array), C-contiguous;
        with ``bfloat16=True``, uint16 bfloat16 bits.
    scale, shift : GPU array or number
        GPU arrays of data's dtype (uint16 bits with ``bfloat16=True``) broadcasting to
        data's shape, or Python numbers or host scalars (passed by value).  ``shift`` has
        ``scale``'s shape.
    destination_type : str
        As for :func:`fp8kit.fake_convert`.
    mode : {"spec", "openvino", "openvino-fp16", "openvino-f32"}
        As for :func:`fp8kit.fake_convert` ("openvino" follows the host's CPU).
    out : GPU array, optional
        C-contiguous, data's shape and dtype; may be ``data`` itself.
    bfloat16 : bool, default False
        ``data`` (and array scale/shift) hold bfloat16 bits in uint16 arrays.

    Returns
    -------
    numba device array
        data's shape and dtype (uint16 bits for bfloat16), or ``out``.

    Raises
    ------
    TypeError
        Host arrays mixed with GPU data, or dtypes other than data's.
    ValueError
        Unknown destination or mode, non-contiguous data, shapes that do not broadcast, or
        scales varying along more than 4 merged dimensions.

    Examples
    --------
    >>> import numpy as np
    >>> from numba import cuda  # doctest: +SKIP
    >>> import fp8kit.cuda
    >>> x = cuda.to_device(np.array([0.3, 1000.0, -3.0], np.float32))  # doctest: +SKIP
    >>> fp8kit.cuda.fake_convert(x, 1.0).copy_to_host().tolist()  # doctest: +SKIP
    [0.3125, 448.0, -3.0]

    (The examples need a GPU or numba's CUDA simulator; the simulator tests run them.)
    """
    d = _device(data, "data", "fake_convert")
    if bfloat16:
        if d.dtype not in (np.dtype(np.uint16), _BF16):
            raise TypeError(f"fake_convert: bfloat16=True needs uint16 data; got {d.dtype}")
        data_dtype = _BF16
    elif d.dtype in (_F32, _F16, _BF16):
        data_dtype = d.dtype
    else:
        hint = "; for bfloat16 bits use fp8kit.cuda.fake_convert(..., bfloat16=True)"
        raise TypeError(
            "fake_convert: data must be float32, float16 or bfloat16; got "
            f"{d.dtype}{hint if d.dtype == np.uint16 else ''}"
        )
    fmt = _destination(destination_type)
    if not rounds_in_place(fmt):
        raise ValueError(
            f"fake_convert: destination_type {fmt.name!r} (an unsigned or precision-1 P3109 "
            "format) is not supported on the GPU; copy the data to the host"
        )
    variant = openvino_variant(mode, fmt)
    if d.size > 1 and not d.is_c_contiguous():
        raise ValueError(
            f"fake_convert: data must be C-contiguous on the GPU (shape {tuple(d.shape)}, "
            f"strides {tuple(d.strides)}); make a contiguous copy first"
        )
    bits = bits_dtype(data_dtype)
    shape = tuple(d.shape)
    s_arr, s_val, s_shape = _operand(scale, data_dtype, bits, "scale")
    has_shift = shift is not None
    h_arr, h_val, h_shape = (None, bits.type(0), s_shape)
    if has_shift:
        h_arr, h_val, h_shape = _operand(shift, data_dtype, bits, "shift")
    if h_shape != s_shape:
        raise ValueError(
            f"fake_convert: shift has shape {h_shape} but scale has {s_shape}; they must match"
        )
    try:
        ok = np.broadcast_shapes(s_shape, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"fake_convert: scale of shape {s_shape} does not broadcast to data's {shape}"
        )
    xb = _flat(d, "C", bits)
    if out is not None:
        target = _check_out(out, shape, (data_dtype, bits) if bfloat16 else (data_dtype,),
                            "C", "fake_convert")  # fmt: skip
        xb = _flat(_separate(d, target, "C"), "C", bits)
    else:
        target = _empty(shape, bits if bfloat16 else data_dtype)
    n4, st4 = np.ones(4, np.int64), np.zeros(4, np.int64)
    strides = {_element_strides(a, shape) for a in (s_arr, h_arr) if a is not None}
    if len(strides) > 1:
        raise ValueError("fake_convert: scale and shift must have the same memory layout")
    if strides:
        merged = _merge(shape, strides.pop())
        if merged is None:
            raise ValueError(
                "fake_convert: on the GPU scale/shift may vary along at most 4 merged "
                f"dimensions of data's shape {shape}"
            )
        n4, st4 = merged
    # an operand given by value gets the data as a stand-in array argument (never read)
    s_flat = xb if s_arr is None else _flat(s_arr, _order(s_arr, "scale", "fake_convert"), bits)
    h_flat = xb if h_arr is None else _flat(h_arr, _order(h_arr, "shift", "fake_convert"), bits)
    kernel = _kernels.fake_kernel(
        fmt, data_dtype, has_shift, variant, s_arr is not None, h_arr is not None
    )
    zero = bits.type(0)
    _launch(
        kernel, d.size, xb, s_flat, h_flat,
        zero if s_val is None else s_val, zero if h_val is None else h_val,
        int(n4[1]), int(n4[2]), int(n4[3]), *(int(v) for v in st4),
        _flat(target, "C", bits),
    )  # fmt: skip
    return out if out is not None else target
