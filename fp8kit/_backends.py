"""The one place that decides which backend runs a public call (the dispatch layer).

Every public array function (``encode``, ``decode``, ``round_to``, ``astype``, ``cast``,
``fake_convert``, ``pack``, ``unpack``) starts with::

    kind = _backends.kind_of(x, out)
    if kind != "numpy":
        return _backends.call(kind, "encode", encode, (x, fmt), {...})

and otherwise runs its numpy path (the CPU kernels).  The kinds, strongest first:

* ``"cuda"``: a GPU array (:mod:`fp8kit.cuda`);
* ``"dask"``: a Dask array (:mod:`fp8kit._dask`: lazy, blockwise over the numpy path);
* ``"xarray"``: a DataArray: unwrapped, the call made on its data, the result rewrapped;
* ``"masked"``: a numpy masked array: the same, the mask kept;
* ``"torch"``, ``"dlpack"``: a torch CPU tensor or any ``__dlpack__`` object, read as a
  numpy array (zero-copy where possible); results are numpy.

The wrappers call the public function again on what they unwrapped (passed in as
``public``), so an xarray of Dask data ends in the Dask backend.  Backends receive the
public function as an argument and never import a public module: adding a backend means a
kind here and a module below.  Nothing here imports dask, xarray or torch: they are
recognised by their type's module.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from . import _args

#: Positions of the array arguments of each public function (``out`` is a keyword).
ARRAY_ARGS = {"fake_convert": (0, 1, 2)}
_ORDER = ("cuda", "dask", "xarray", "masked", "torch", "dlpack", "numpy")
_RANK = {k: i for i, k in enumerate(_ORDER)}


def is_masked(a: Any) -> bool:
    """Whether ``a`` is a numpy masked array, without importing ``numpy.ma`` (``np.ma``,
    looked up, imports it: 5-6 ms of a first study call on plain arrays; a masked array
    means it is imported already)."""
    ma = sys.modules.get("numpy.ma")
    return ma is not None and isinstance(a, ma.MaskedArray)


def _kind(a: Any) -> str:
    t = type(a)
    if a is None or t is np.ndarray or isinstance(a, (np.generic, int, float, str, list, tuple)):
        return "numpy"
    if isinstance(a, np.ndarray):
        return "masked" if is_masked(a) else "numpy"
    if _args.on_device(a):
        return "cuda"
    module = t.__module__ or ""
    if module.startswith("dask.") and hasattr(a, "dask") and hasattr(a, "chunks"):
        return "dask"
    if module.startswith("xarray.") and t.__name__ == "DataArray":
        return "xarray"
    if module.startswith("torch") and hasattr(a, "detach"):
        return "torch"
    if hasattr(a, "__dlpack__") and not (
        hasattr(a, "__array__") or hasattr(a, "__array_interface__")
    ):
        # (objects numpy reads itself, such as JAX arrays of bfloat16, which DLPack cannot
        # carry to numpy, stay on the numpy path)
        return "dlpack"
    return "numpy"


def kind_of(*arrays: Any) -> str:
    """The backend of a call on these arguments: the strongest kind among them."""
    best = "numpy"
    for a in arrays:
        k = _kind(a)
        if _RANK[k] < _RANK[best]:
            best = k
    return best


def call(kind: str, name: str, public, args: tuple, kwargs: dict):
    """Run public function ``name`` (the callable ``public``) on ``kind`` arrays."""
    if kind == "cuda":
        return _cuda(name, args, kwargs)
    if kind == "dask":
        from . import _dask

        return _dask.call(name, public, args, kwargs)
    positions = ARRAY_ARGS.get(name, (0,))
    if kind == "xarray":
        return _xarray(name, public, args, kwargs, positions)
    if kind == "masked":
        return _masked(name, public, args, kwargs)
    # torch, dlpack: read every such argument as numpy, then the numpy path
    new = list(args)
    for i in positions:
        if i < len(new):
            new[i] = as_numpy(new[i], name)
    if kwargs.get("out") is not None:
        kwargs = {**kwargs, "out": as_numpy(kwargs["out"], name)}
    return public(*new, **kwargs)


# ------------------------------------------------------------------------------- GPU
_E8M0_NAMES = ("float8_e8m0fnu", "float8e8m0", "f8e8m0")


def _is_e8m0(to: Any) -> bool:
    if isinstance(to, str):
        return to.lower() in _E8M0_NAMES
    try:
        import ml_dtypes

        return np.dtype(to) == np.dtype(ml_dtypes.float8_e8m0fnu)
    except TypeError:
        return False


def _flushes(kwargs: dict) -> bool:
    return kwargs.get("flush_subnormals") is not False or (
        kwargs.get("flush_subnormal_inputs") is not False
    )


def _cuda(name: str, args: tuple, kwargs: dict):
    from .cuda import _dispatch

    if name in ("pack", "unpack"):
        raise TypeError(f"{name}: GPU arrays are not supported; copy the codes to the host")
    if name == "cast":
        x, to = args
        e8m0 = _is_e8m0(to)
        if kwargs["rounding"] != "nearest_even" or e8m0 or _flushes(kwargs):
            raise ValueError(
                "cast: on the GPU, only rounding='nearest_even' to Cast-21 types is "
                "implemented (and no flush options); use fp8kit.encode(x, fmt, rounding=...) "
                "for the codes"
            )
        return _dispatch.cast(x, to, saturate=kwargs["saturate"], rules=kwargs["rules"])
    if name == "fake_convert":
        if kwargs["rounding"] != "nearest_even" or _flushes(kwargs):
            raise ValueError(
                "fake_convert: on the GPU, only rounding='nearest_even' is implemented (and "
                "no flush options)"
            )
        return _dispatch.fake_convert(*args, mode=kwargs["mode"], out=kwargs["out"])
    if name == "astype":
        return _dispatch.astype(*args, saturate=kwargs["saturate"])
    return getattr(_dispatch, name)(*args, **kwargs)


# ------------------------------------------------------------------------------- wrappers
def _xarray(name, public, args, kwargs, positions):
    x = args[0]
    new = list(args)
    for i in positions:
        if i < len(new) and _kind(new[i]) == "xarray":
            new[i] = new[i].data
    kw = dict(kwargs)
    out = kw.get("out")
    if out is not None and _kind(out) == "xarray":
        kw["out"] = out.data
    res = public(*new, **kw)
    if name in ("pack", "unpack") or np.shape(res) != x.shape:
        return res
    import xarray as xr

    return xr.DataArray(res, dims=x.dims, coords=x.coords, name=x.name, attrs=dict(x.attrs))


def _zero(dtype: np.dtype):
    if dtype.kind in "USO":
        return "0"
    return np.zeros((), dtype)[()]


def _masked(name, public, args, kwargs):
    x = args[0]
    if name in ("pack", "unpack"):
        raise TypeError(
            f"{name}: masked arrays are not supported (packed bytes carry no per-element "
            "mask); fill the masked elements first, e.g. x.filled(0)"
        )
    mask = np.ma.getmaskarray(x)
    data = np.ma.getdata(x)
    if mask.any():
        # masked elements' data may be anything (codes out of range, unparsable strings):
        # they are computed from a zero instead, and stay masked
        data = data.copy()
        data[mask] = _zero(data.dtype)
    new = (data,) + tuple(np.ma.getdata(a) if is_masked(a) else a
                          for a in args[1:])  # fmt: skip
    kw = dict(kwargs)
    out = kw.get("out")
    if is_masked(out):
        kw["out"] = np.ma.getdata(out)
    res = public(*new, **kw)
    if np.shape(res) != mask.shape:
        mask = np.broadcast_to(mask, np.shape(res))
    return np.ma.MaskedArray(res, mask=mask.copy())


# (torch dtypes numpy lacks -> the ml_dtypes dtype of their bits, and the torch integer
# dtype of the same width to view them as)
_TORCH_ML = {
    "bfloat16": ("bfloat16", "int16"),
    "float8_e4m3fn": ("float8_e4m3fn", "uint8"),
    "float8_e4m3fnuz": ("float8_e4m3fnuz", "uint8"),
    "float8_e5m2": ("float8_e5m2", "uint8"),
    "float8_e5m2fnuz": ("float8_e5m2fnuz", "uint8"),
    "float8_e8m0fnu": ("float8_e8m0fnu", "uint8"),
}


def as_numpy(a: Any, func: str) -> Any:
    """A torch CPU tensor or ``__dlpack__`` object as a numpy array (zero-copy where
    possible; torch's bfloat16 and float8 through an integer view as ml_dtypes); anything
    else unchanged."""
    k = _kind(a)
    if k == "torch":
        t = a.detach()  # read without autograd (requires_grad tensors, Parameters)
        if t.device.type != "cpu":
            raise TypeError(
                f"{func}: a torch tensor on {t.device} is neither a CPU tensor nor a CUDA "
                "array; move it to the CPU first (fp8kit does not copy between devices)"
            )
        if t.is_conj() or t.is_neg():
            t = t.resolve_conj().resolve_neg()
        name = str(t.dtype).removeprefix("torch.")
        if name in _TORCH_ML:
            import ml_dtypes
            import torch

            ml, view = _TORCH_ML[name]
            return t.view(getattr(torch, view)).numpy().view(getattr(ml_dtypes, ml))
        return t.numpy()
    if k == "dlpack":
        try:
            return np.from_dlpack(a)
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            raise TypeError(
                f"{func}: could not read {type(a).__name__} through __dlpack__ as a numpy "
                f"array ({exc})"
            ) from exc
    return a
