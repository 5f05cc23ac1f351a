"""OpenVINO FakeConvert-13: quantize-dequantize through an 8-bit float format, fused."""

from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np

from . import _args, _backends, _parallel
from ._kernels.codec import bits_dtype, dummy, f16_lut
from ._kernels.encode16 import fake16_kernel, fake_kernel, fake_scalars, fake_walk_kernel
from ._kernels.fake import SPEC, fake_convert_kernel, round_params
from ._kernels.rounding import NEAREST_EVEN, is_stochastic
from ._kernels.tables import decode_table
from .formats import FloatFormat

__all__ = ["fake_convert"]

#: Outputs from this size on are written with non-temporal stores (see
#: :func:`fp8kit._kernels.fake.fake_convert_kernel`): far beyond the per-core caches, where
#: nothing written will be read back from cache.
STREAM_MIN_BYTES = 32 << 20

_DATA_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


# (the argument helpers live in fp8kit._args; these names stay for existing importers)
_destination = _args.destination
MODES = _args.FAKE_MODES
host_has_avx512_fp16 = _args.host_has_avx512_fp16
#: Run spec-mode nearest-even FakeConvert in the kernels of LLVM vector code (one scale, rows,
#: any layout); tests switch it off to compare with the general kernel.
_VECTOR_KERNELS = True

_merge = _args.merge
_element_strides = _args.element_strides


def openvino_variant(mode: Any, fmt: FloatFormat) -> int:
    """The kernels' variant for ``mode`` (and check that ``fmt`` suits it)."""
    return _args.openvino_variant(mode, fmt, host_has_avx512_fp16)  # (a global: patchable)


def _operand(value: Any, dtype: np.dtype, argname: str) -> np.ndarray:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return np.asarray(value, dtype=dtype)  # a Python number takes data's type
    arr = np.asarray(value)
    if arr.dtype != dtype:
        raise TypeError(
            f"fake_convert: {argname} has dtype {arr.dtype} but data has {dtype}; FakeConvert "
            f"requires {argname} of the same type as data (or a Python number)"
        )
    return arr


def _by_steps(x, sc, sh, fmt, rounding, rmode, key, random_bits, ftz):
    """FakeConvert's formula step by step in float32 numpy operations and
    :func:`fp8kit.round_to` (for the destinations its kernels cannot round in place: the
    unsigned and precision-1 P3109 formats): the same float32 operations, each rounded once,
    as the kernel; the element's C-order index keys stochastic rounding there too."""
    from .codec import round_to

    s = sc.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        y = x.astype(np.float32) * s
        if sh is not None:
            y -= sh.astype(np.float32)
        np.clip(y, -fmt.max, fmt.max, out=y)  # (NaN stays NaN)
        # (the seed fake_convert resolved: a fresh one is drawn once, not again here)
        kw = {"seed": int(key[0]) | int(key[1]) << 32} if is_stochastic(rmode) else {}
        round_to(y, fmt, saturate=True, rounding=rounding, random_bits=random_bits,
                 flush_subnormals=ftz, out=y, **kw)  # fmt: skip
        if sh is not None:
            y += sh.astype(np.float32)
        y /= s
    return y if x.dtype == np.float32 else y.astype(x.dtype)


def fake_convert(
    data: Any,
    scale: Any,
    shift: Any = None,
    destination_type: Any = "f8e4m3",
    *,
    mode: str = "spec",
    out: np.ndarray | None = None,
    rounding: str = "nearest_even",
    seed: Any = None,
    random_bits: int = 16,
    flush_subnormals: bool = False,
    flush_subnormal_inputs: bool = False,
) -> np.ndarray:
    """FakeConvert-13: ``(round(data * scale - shift) + shift) / scale``, in one fused pass.

    ``round`` is nearest-even, once, to ``destination_type`` with saturation to +-max finite
    (Inf too); NaN stays NaN.  float16 and bfloat16 data are computed in float32 and the
    result is rounded once to data's type.  Division by a zero scale follows IEEE (+-Inf or
    NaN).

    Parameters
    ----------
    data : ndarray
        float32, float16 or bfloat16 (ml_dtypes) data of any shape.
    scale : array_like
        Same dtype as data (or a Python number); broadcasts to data's shape.
    shift : array_like, optional
        Same dtype and shape as ``scale``.
    destination_type : str
        ``"f8e4m3"`` or ``"f8e5m2"`` (the spec's), or any 8-bit fp8kit format name
        (``mode="spec"`` only).
    mode : {"spec", "openvino", "openvino-fp16", "openvino-f32"}, default "spec"
        ``"spec"``: the formula, each step rounded once (above).  The others give the bits
        of the openvino package's CPU device (2026.4 on x86-64): the product is clamped
        (NaN -> -max), stored in the nodes' type, rounded to float16 and then to float8,
        and divided by multiplying with a reciprocal.  ``"openvino-fp16"``: as on CPUs with
        AVX512-FP16 (float16 data on float16 nodes); ``"openvino-f32"``: as on CPUs
        without it (float16 models computed in float32, and a software float16 rounding
        that slips for some float16 subnormals); ``"openvino"``: whichever of the two
        this machine's CPU gives.  See docs/fake_convert.md.
    out : ndarray, optional
        Output of data's dtype and shape.
    rounding : str, default "nearest_even"
        How ``round`` rounds (``mode="spec"`` only): any mode of :func:`fp8kit.encode`,
        e.g. ``"stochastic"`` (then ``seed`` and ``random_bits`` as there; element ``i`` of
        data in C order draws the random word ``i``).  Saturation to +-max is unchanged.
    seed, random_bits
        Stochastic rounding only; see :func:`fp8kit.encode`.
    flush_subnormals : bool, default False
        ``round`` gives zero (of the value's sign) where its result is subnormal in
        ``destination_type`` (``mode="spec"`` only); see :func:`fp8kit.encode`.
    flush_subnormal_inputs : bool, default False
        Subnormals of data's own dtype are taken as zeros of their sign.

    Returns
    -------
    ndarray
        Same dtype and shape as data.

    Raises
    ------
    TypeError
        Non-float data, or scale/shift of another dtype.
    ValueError
        Unknown destination type, shapes that do not broadcast, or shift's shape differing
        from scale's.

    Examples
    --------
    >>> import numpy as np, fp8kit
    >>> x = np.array([0.3, 1000.0, -3.0], np.float32)
    >>> fp8kit.fake_convert(x, np.float32(1.0)).tolist()
    [0.3125, 448.0, -3.0]
    >>> fp8kit.fake_convert(x, np.float32(0.5), destination_type="f8e5m2").tolist()
    [0.3125, 1024.0, -3.0]
    """
    kind = _backends.kind_of(data, scale, shift, out)
    if kind != "numpy":
        return _backends.call(
            kind, "fake_convert", fake_convert, (data, scale, shift, destination_type),
            dict(mode=mode, out=out, rounding=rounding, seed=seed, random_bits=random_bits,
                 flush_subnormals=flush_subnormals,
                 flush_subnormal_inputs=flush_subnormal_inputs),
        )  # fmt: skip
    return _fake_convert(
        data, scale, shift, _Checked(destination_type), mode=mode, out=out, rounding=rounding,
        seed=seed, random_bits=random_bits, flush_subnormals=flush_subnormals,
        flush_subnormal_inputs=flush_subnormal_inputs,
    )  # fmt: skip


class _Checked:
    """A destination_type still to be checked (:func:`fp8kit._args.destination`)."""

    def __init__(self, name: Any) -> None:
        self.name = name


def quantize_dequantize(x: np.ndarray, scale: np.ndarray, fmt: FloatFormat, out=None, **rnd):
    """FakeConvert's formula (``mode="spec"``) to any format that FakeConvert's kernels round
    on float32 bits (:func:`fp8kit._args.rounds_in_place`: the study's fp4 and fp6 formats
    too, which ``fake_convert``, OpenVINO's 8-bit op, does not take as destinations), with
    ``rnd`` its rounding keywords: the study's quantization in its kernels, not in numpy
    steps (3x slower, and NaN became -0 for formats without NaN)."""
    return _fake_convert(x, scale, None, fmt, out=out, **rnd)


def _fake_convert(
    data, scale, shift, destination_type, *, mode="spec", out=None, rounding="nearest_even",
    seed=None, random_bits=16, flush_subnormals=False, flush_subnormal_inputs=False,
):  # fmt: skip
    """:func:`fake_convert` of numpy data; ``destination_type`` a FloatFormat taken as is, or
    a :class:`_Checked` name or format (fake_convert's, checked here in its turn)."""
    arr = np.asarray(data)
    if arr.dtype not in _DATA_DTYPES:
        raise TypeError(f"fake_convert: data must be float32, float16 or bfloat16; got {arr.dtype}")
    ftz = _args.flag(flush_subnormals, "flush_subnormals", "fake_convert")
    if _args.flag(flush_subnormal_inputs, "flush_subnormal_inputs", "fake_convert"):
        arr = np.asarray(_args.flush_inputs(arr))
    if isinstance(destination_type, _Checked):
        fmt = _destination(destination_type.name)
    else:
        fmt = destination_type
    variant = openvino_variant(mode, fmt)
    sc = _operand(scale, arr.dtype, "scale")
    sh = None if shift is None else _operand(shift, arr.dtype, "shift")
    if sh is not None and sh.shape != sc.shape:
        raise ValueError(
            f"fake_convert: shift has shape {sh.shape} but scale has {sc.shape}; they must match"
        )
    try:
        ok = np.broadcast_shapes(sc.shape, arr.shape) == arr.shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"fake_convert: scale of shape {sc.shape} does not broadcast to data's {arr.shape}"
        )
    if out is not None:
        if not isinstance(out, np.ndarray) or out.dtype != arr.dtype or out.shape != arr.shape:
            raise ValueError(
                f"fake_convert: out must be an array of dtype {arr.dtype} and shape {arr.shape}"
            )
        if not out.flags.writeable:
            raise ValueError("fake_convert: out is read-only")
    if arr.ndim == 0:  # (the kernels take arrays of 1-d and up: numpy's 0-d result)
        res = _fake_convert(
            arr.reshape(1), sc, sh, fmt, mode=mode, out=None if out is None else out.reshape(1),
            rounding=rounding, seed=seed, random_bits=random_bits, flush_subnormals=ftz,
        )  # fmt: skip
        return out if out is not None else res.reshape(())
    x = np.ascontiguousarray(arr)
    # scale and shift stay their own (small) size: the kernel reads them through strides
    # (exact: scale has data's type; float32 operands are not copied: a scale per element
    # of 16M float32 was copied on every call, 64 MiB read and written)
    sc32 = np.ascontiguousarray(sc.astype(np.float32, copy=False))
    sh32 = None if sh is None else np.ascontiguousarray(sh.astype(np.float32, copy=False))
    merged = _merge(x.shape, _element_strides(sc32, x.shape))
    if merged is None:  # more than 4 independent dimensions: expand the operands
        sc32 = np.ascontiguousarray(np.broadcast_to(sc32, x.shape))
        sh32 = None if sh32 is None else np.ascontiguousarray(np.broadcast_to(sh32, x.shape))
        merged = _merge(x.shape, _element_strides(sc32, x.shape))
    shape4, sstr4 = merged
    if sstr4[3] not in (0, 1):  # (not produced by _merge for contiguous operands)
        raise AssertionError(f"unexpected inner scale stride {sstr4[3]}")
    sc_flat = sc32.reshape(-1)
    sh_flat = np.zeros(1, np.float32) if sh32 is None else sh32.reshape(-1)
    ov = variant != SPEC
    rmode, key, rbits = _args.rounding(rounding, seed, random_bits, "fake_convert")
    # the flat index of x[0]: non-zero for a Dask block (the random stream is keyed by it)
    offset = _args.current_offset() if is_stochastic(rmode) else 0
    if ov and rmode != NEAREST_EVEN:
        raise ValueError(
            f"fake_convert: mode={mode!r} rounds to nearest-even only; got rounding={rounding!r}"
        )
    if ov and ftz:
        raise ValueError(f"fake_convert: mode={mode!r} does not take flush_subnormals=True")
    if not _args.rounds_in_place(fmt):
        res = _by_steps(x, sc, sh, fmt, rounding, rmode, key, rbits, ftz)
        if out is None:
            return res
        np.copyto(out, res)
        return out
    target = out if (out is not None and out.flags.c_contiguous) else np.empty(x.shape, arr.dtype)
    # NaN scales or shifts: the walking kernels that fix x86's NaN rule (another kernel of
    # each, so that the others spend no instruction on it)
    fix_nan = bool(np.isnan(sc_flat).any() or np.isnan(sh_flat).any())
    # spec, nearest-even: kernels of LLVM vector code, which compile in less than half the
    # time
    vector = _VECTOR_KERNELS and not ov and rmode == NEAREST_EVEN and not ftz
    if vector and sc_flat.size == 1 and not fix_nan:  # one scale (a tensor's): 0.16 s cold
        scalars = fake_scalars(round_params(fmt), sc_flat[0], None if sh is None else sh_flat[0])
        if arr.dtype == np.float32:
            kernel, bits = fake_kernel(), np.uint32
        else:  # (bfloat16 and float16: the float32 steps on their values, then rounded)
            kernel, bits = fake16_kernel(arr.dtype), np.uint16
        _parallel.launch(
            kernel, x.size, x.reshape(-1).view(bits), scalars, dummy(np.uint8),
            target.reshape(-1).view(bits),
        )  # fmt: skip
        return _into(out, target)
    if (
        _VECTOR_KERNELS and not ov and (rmode != NEAREST_EVEN or ftz) and x.size
        and _rounds_natively(fmt, rmode, rbits, ftz)
    ):  # fmt: skip
        # the other rounding modes (and flushing): three passes, round_to's kernel between
        # the walk's steps (stochastic rounding: the Numba kernel compiled in 0.8-0.9 s and
        # ran 1.6x slower; the deterministic modes' fused walk read its codes from LLVM IR
        # that round_to's modes no longer have, and the general kernel's fused loop ran
        # 145 us or 1.9 ms for 256K float32 depending on the build)
        shifts = sh_flat if sh is not None else None
        nans = _nan_inputs(fmt, x, sc32, sh32)
        _in_steps(x, fmt, sc_flat, shifts, shape4, sstr4, target, rounding, rmode, key, rbits,
                  ftz, target is out, fix_nan)  # fmt: skip
        return _into(out, _nan_kept(nans, target))
    # (the CPU plugin's arithmetic, mode="openvino": the general kernel below, as fast as
    # the walk's vector code was)
    walk = fake_walk_kernel(8 * arr.itemsize, fix_nan=fix_nan) if vector and x.size else None
    if walk is not None:
        # scales in any other layout (per row, per column, per element, MX blocks) and
        # shifts alike: one kernel of vector code walking the rows (the scale of each
        # element read through the strides), for float32 and (another) for 16-bit data
        consts = _walk_consts(fmt, arr.dtype, sh is not None, target is out)
        bits = bits_dtype(arr.dtype)
        xf, tf = x.reshape(-1).view(bits), target.reshape(-1).view(bits)
        hf = sh_flat if sh is not None else sc_flat
        for lo, hi, shp, sst in _row_pieces(shape4, sstr4, tf):
            k = lo * int(sstr4[3])  # (the scale index of element lo of a single row)
            _parallel.launch(walk, hi - lo, consts, xf[lo:hi], sc_flat[k:], hf[k:], shp, sst,
                             tf[lo:hi])  # fmt: skip
        return _into(out, target)
    kernel = fake_convert_kernel(
        fmt, arr.dtype, sh is not None, bool(sstr4[3] == 1), variant, rmode, rbits,
        # (mode="openvino" is compute-bound: staging measured 1.4x slower there)
        not ov and arr.nbytes >= STREAM_MIN_BYTES, ftz,
    )  # fmt: skip
    integer_path = rmode != NEAREST_EVEN or ftz
    table = decode_table(fmt, np.float32) if integer_path else dummy(np.uint32)
    lut = f16_lut() if (arr.dtype == np.float16 or ov) else dummy(np.uint32)
    bits = bits_dtype(arr.dtype)
    nans = _nan_inputs(fmt, x, sc32, sh32)
    _parallel.launch(
        kernel, x.size, x.reshape(-1).view(bits), sc_flat, sh_flat, lut, table.view(np.uint32),
        key, offset, shape4, sstr4, target.reshape(-1).view(bits),
    )  # fmt: skip
    return _into(out, _nan_kept(nans, target))


@functools.cache
def _rounds_natively(fmt: FloatFormat, rmode: int, rbits: int, ftz: bool) -> bool:
    """Whether :func:`fp8kit.round_to` rounds float32 data to ``fmt`` in ``rmode`` (with
    ``rbits`` random bits, flushing with ``ftz``), saturating, with a native kernel (no
    Numba compile): the deterministic modes' (AVX512-VBMI planes) or stochastic
    rounding's."""
    from ._kernels.codec import encode_mode_kernel
    from ._kernels.decode import format_planes
    from ._kernels.modes import round_mode_kernel
    from ._kernels.native import _NativeBase

    f32 = np.dtype(np.float32)
    if format_planes(fmt, f32) is None:
        return False
    if round_mode_kernel(fmt, f32, True, rmode, ftz) is not None:
        return True
    table = decode_table(fmt, f32)
    kernel, _ = encode_mode_kernel(
        fmt, f32, True, rmode, rbits, table_dtype=table.dtype, flush=ftz, planes=True
    )
    return isinstance(kernel, _NativeBase)


def _in_steps(
    x, fmt, sc_flat, sh_flat, shape4, sstr4, target, rounding, rmode, key, rbits, ftz, may_stream,
    fix_nan=False,
):  # fmt: skip
    """FakeConvert of ``x`` (C-contiguous) into ``target`` in a rounding mode other than
    nearest-even (or flushing) in three native passes: ``x * scale - shift`` clamped to
    the format's range, in float32 (the row-walking kernel's ``"pre"`` stage; into
    ``target`` for float32 data, else a float32 buffer), rounded in place by
    :func:`fp8kit.round_to`'s kernels (the same random stream: each element's flat index,
    plus the Dask block's offset, keys its random word), then ``(q + shift) / scale`` in
    the data's type (``"post"``).  The same float32 operations as the general kernel's
    fused loop; ``sh_flat`` None: no shift; ``may_stream``: see :func:`_walk_consts`;
    ``fix_nan``: scales or shifts may be NaN (:func:`fake_walk_kernel`)."""
    from .codec import round_to

    width = 8 * x.dtype.itemsize
    consts = _walk_consts(fmt, x.dtype, sh_flat is not None, may_stream)
    bits = bits_dtype(x.dtype)
    flat = target.reshape(-1)
    y = flat.view(np.float32) if width == 32 else np.empty(x.size, np.float32)
    hf = sc_flat if sh_flat is None else sh_flat

    along = bool(sstr4[3] != 0)  # (compiled into the stages: see fake_walk_kernel)

    def walk(stage, src, dst):
        kernel = fake_walk_kernel(width, stage=stage, fix_nan=fix_nan, along=along)
        for lo, hi, shp, sst in _row_pieces(shape4, sstr4, dst):
            k = lo * int(sstr4[3])
            _parallel.launch(kernel, hi - lo, consts, src[lo:hi], sc_flat[k:], hf[k:], shp, sst,
                             dst[lo:hi])  # fmt: skip

    walk("pre", x.reshape(-1).view(bits), y.view(np.uint32))
    # (the key fake_convert resolved, as a seed: a fresh one is not drawn again)
    kw = {}
    if is_stochastic(rmode):
        kw = {"seed": int(key[0]) | int(key[1]) << 32, "random_bits": rbits}
    round_to(y, fmt, rounding=rounding, flush_subnormals=ftz, out=y, **kw)
    walk("post", y.view(np.uint32), flat.view(bits))


#: Elements a row of :func:`_row_pieces`.
_ROW = 4096


def _row_pieces(shape4, sstr4, out=None):
    """``(lo, hi, shape, strides)`` pieces of the flat range of data walked as ``shape4``
    with scale strides ``sstr4`` for the walking kernel, whose threads share rows: one long
    row (a single scale, or one per element of 1-D data) is cut into rows of :data:`_ROW`
    elements, after a first piece up to the first cache line of ``out`` (so that the
    kernel can stream whole lines of it), and the rest; anything else is one piece."""
    n = int(shape4[3])
    if shape4[0] != 1 or shape4[1] != 1 or shape4[2] != 1 or n < 2 * _ROW:
        return [(0, n * int(shape4[0] * shape4[1] * shape4[2]), shape4, sstr4)]
    st = int(sstr4[3])

    def row(lo, hi):
        return (lo, hi, np.array([1, 1, 1, hi - lo], np.int64), np.array([0, 0, 0, st], np.int64))

    head = 0
    if out is not None and out.ctypes.data % out.itemsize == 0:
        head = (-out.ctypes.data % 64) // out.itemsize
    rows = (n - head) // _ROW
    pieces = [row(0, head)] if head else []
    pieces.append((head, head + rows * _ROW, np.array([1, 1, rows, _ROW], np.int64),
                   np.array([0, 0, _ROW * st, st], np.int64)))  # fmt: skip
    if head + rows * _ROW < n:
        pieces.append(row(head + rows * _ROW, n))
    return pieces


def _walk_consts(fmt, dtype, has_shift: bool, may_stream: bool) -> np.ndarray:
    """The ``consts`` of the row-walking kernel: :func:`fake_scalars` (the format's
    constants; a shift or not), then 1 for float16 data, and whether it may write large
    outputs with non-temporal stores: only into an array the caller gave (``out``), not a
    new one, whose pages the first stores fault in (streamed there, 16M float32 in rows of
    32 measured 15-20% slower; into an existing array up to 1.4x faster)."""
    consts = fake_scalars(round_params(fmt), np.float32(1.0), 0.0 if has_shift else None)
    return np.append(consts, np.array([dtype == np.float16, may_stream], np.uint32))


def _nan_inputs(fmt, x, sc32, sh32):
    """Where ``x * scale - shift`` is NaN, and those NaNs (quiet, of their sign, as the
    nearest-even kernels give them), for a format without NaN (fp4, fp6) rounded in the
    steps that round to codes (round_to's kernels, the general kernel's integer path),
    whose NaN code is the value -0 where FakeConvert keeps NaN; None for the others or
    where there is none.  Read before the kernels run: ``out`` may be ``x``."""
    if fmt.has_nan:
        return None
    with np.errstate(all="ignore"):
        y = x.astype(np.float32) * sc32
        if sh32 is not None:
            y -= sh32
    nan = np.isnan(y)
    return (nan, np.copysign(np.float32(np.nan), y[nan])) if nan.any() else None


def _nan_kept(nans, target):
    """``target`` with the NaNs :func:`_nan_inputs` found put back."""
    if nans is not None:
        target[nans[0]] = nans[1].astype(target.dtype)
    return target


def _into(out, target):
    """The result: ``target``, copied into ``out`` first where that is not it (an ``out``
    that is not C-contiguous)."""
    if out is not None and target is not out:
        np.copyto(out, target)
        return out
    return target
