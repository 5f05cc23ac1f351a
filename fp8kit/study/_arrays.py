"""Input checks and array layouts shared by the study modules."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .._backends import as_numpy, is_masked
from ..fake_convert import _element_strides, _merge

#: A chunk of a tensor: one ``(start, stop)`` range per dimension.
Box = tuple[tuple[int, int], ...]

#: Data dtypes the studies accept; 16-bit data is worked on in float32 (an exact widening).
DATA_DTYPES = (
    np.dtype(np.float16),
    np.dtype(ml_dtypes.bfloat16),
    np.dtype(np.float32),
    np.dtype(np.float64),
)
_NAMES = "float16, bfloat16, float32 or float64"


def array_kind(x: Any) -> tuple[str, Any]:
    """``(kind, array)``: ``"dask"`` for a dask array (an xarray DataArray is unwrapped to
    its data first), ``"masked"`` for a numpy masked array, else ``"numpy"`` (anything
    ``np.asarray`` takes).  Neither dask nor xarray is imported."""
    mod = type(x).__module__ or ""
    if mod.startswith("xarray.") and hasattr(x, "dims") and hasattr(x, "data"):
        x = x.data
        mod = type(x).__module__ or ""
    if mod.startswith("dask.") and hasattr(x, "__dask_graph__") and hasattr(x, "chunks"):
        return "dask", x
    if is_masked(x):
        return "masked", x
    return "numpy", x


def float_data(x: Any, func: str, argname: str = "x", keep_mask: bool = False) -> np.ndarray:
    """x as a native-order float array of a supported dtype, or a TypeError naming it.
    An xarray DataArray gives its data; with ``keep_mask`` a masked array stays masked."""
    kind, x = array_kind(x)
    if kind == "dask":
        raise TypeError(f"{func}: {argname} is a dask array here; expected a numpy array")
    if kind == "numpy":
        # torch tensors as the codec functions read them: detached (requires_grad tensors
        # and Parameters refuse numpy's own conversion), CPU only, bfloat16 and float8 by
        # their bits; DLPack objects through np.from_dlpack
        x = as_numpy(x, func)
    try:
        arr = np.ma.asarray(x) if keep_mask and kind == "masked" else np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{func}: {argname} must be an array of floats") from exc
    dt = arr.dtype
    if not dt.isnative:
        arr = arr.astype(dt.newbyteorder("="))
        dt = arr.dtype
    if dt not in DATA_DTYPES:
        raise TypeError(f"{func}: {argname} must have dtype {_NAMES}; got {dt}")
    return arr


def work_dtype(dtype: np.dtype) -> np.dtype:
    """float64 for float64 data, float32 for everything narrower."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def working(arr: np.ndarray) -> np.ndarray:
    """C-contiguous array in the working dtype (no copy when it already is; 0-d stays 0-d,
    which ``np.ascontiguousarray`` would make 1-d)."""
    a = np.asarray(arr, dtype=work_dtype(arr.dtype))
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def scale_layout(shape: tuple[int, ...], scale: np.ndarray):
    """``(shape4, sstr4, scale_flat)`` for a kernel reading a scale broadcast to ``shape``
    through strides (see :mod:`fp8kit._kernels.fake`).  Expands the scale when the layout
    needs more than 4 merged dimensions."""
    sc = np.ascontiguousarray(scale)
    merged = _merge(shape, _element_strides(sc, shape))
    if merged is None:
        sc = np.ascontiguousarray(np.broadcast_to(sc, shape))
        merged = _merge(shape, _element_strides(sc, shape))
    return merged[0], merged[1], sc.reshape(-1)


def check_axis(axis: Any, ndim: int, func: str, argname: str = "axis") -> int:
    """A normalised axis, or a ValueError naming the argument."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{func}: {argname} must be an int; got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{func}: {argname}={axis} is out of range for an array of {ndim} dims")
    return int(axis) % ndim


def _unmask(y: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """A chunk's data and its mask (None when nothing is masked)."""
    if is_masked(y):
        mask = np.ma.getmaskarray(y)
        return np.asarray(y.data), (mask if mask.any() else None)
    return np.asarray(y), None


def box_slices(box: Box) -> tuple[slice, ...]:
    return tuple(slice(s, e) for s, e in box)


def check_dtype(x: Any, func: str, argname: str = "x") -> None:
    dt = np.dtype(x.dtype)
    if dt.newbyteorder("=") not in DATA_DTYPES:
        raise TypeError(f"{func}: {argname} must have dtype {_NAMES}; got {dt}")


def aligned(x, aligns: dict[int, int]):
    """x rechunked so that along each axis in ``aligns`` every chunk but the last is a
    multiple of the alignment (MX blocks never straddle two chunks)."""
    for axis, a in aligns.items():
        chunks = x.chunks[axis]
        if all(c % a == 0 for c in chunks[:-1]):
            continue
        size = max(a, round(float(np.median(chunks)) / a) * a)
        x = x.rechunk({axis: size})
    return x


def blocks_and_boxes(x):
    """The blocks of x (Delayed, in C order of block index) and their boxes."""
    starts = [np.concatenate([[0], np.cumsum(c)]).astype(int).tolist() for c in x.chunks]
    blocks = x.to_delayed()
    out = []
    for index in np.ndindex(*x.numblocks):
        box = tuple((starts[d][i], starts[d][i + 1]) for d, i in enumerate(index))
        out.append((blocks[index], box))
    return out
