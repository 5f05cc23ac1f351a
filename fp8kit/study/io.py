"""The study's inputs: ``.npy``, ``.npz`` and ``.safetensors`` files, directories and sharded
checkpoints (``*.safetensors.index.json``), read as memory-mapped tensors.

The safetensors reader is our own (:mod:`fp8kit.study._safetensors`, no dependency; the
reference package's numpy loader cannot return bfloat16) and validates a header exactly as
strictly as the reference does.  See ``docs/study.md`` (section "Checkpoints") for the rules
this module implements: which files an input names, the names and order of the tensors,
float8 tensors and their scale tensors, and ml_dtypes ``.npy`` files.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import json
import math
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from ._arrays import DATA_DTYPES
from ._safetensors import (
    MAX_HEADER_SIZE,
    NUMPY_DTYPES,
    SafetensorsHeader,
    StudyInputError,
    not_regular,
    open_map,
    open_regular,
    read_header,
    short_name,
    tensor_view,
)

__all__ = [
    "ScaledFloat8",
    "StudyInputError",
    "StudyInputs",
    "checkpoint_order",
    "load_activations",
    "load_inputs",
    "load_tensors",
    "read_safetensors",
    "read_safetensors_header",
    "scale_blocks",
]

SUFFIXES = (".npy", ".npz", ".safetensors", ".json")

#: The largest compressed ``.npz`` member read (bytes, uncompressed): such a member is
#: decompressed into memory, so a small file could otherwise ask for any amount (2 MB of
#: deflated zeros hold 2 GiB).  Members stored uncompressed (``np.savez``) are
#: memory-mapped and have no limit.
NPZ_MEMBER_LIMIT = 2**30
#: The largest ``*.safetensors.index.json`` read (bytes): the safetensors header's limit.
MAX_INDEX_SIZE = MAX_HEADER_SIZE

#: safetensors dtype codes of the floating types a study reads as they are.
SAFETENSORS_FLOATS = {k: NUMPY_DTYPES[k] for k in ("F16", "BF16", "F32", "F64")}
#: safetensors float8 codes a study decodes (times their scale, when they have one).
SAFETENSORS_FLOAT8 = ("F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ")
#: dtypes a scale tensor may have.
SCALE_CODES = ("F32", "F16", "BF16", "F64", "F8_E8M0")
#: suffixes of a float8 tensor's companion scale, in the order they are looked for.
SCALE_SUFFIXES = ("_scale_inv", "_scale")

#: float8 dtypes studied (decoded); the last three come only from ml_dtypes .npy files.
_FLOAT8_DTYPES = {np.dtype(NUMPY_DTYPES[k]) for k in SAFETENSORS_FLOAT8} | {
    np.dtype(getattr(ml_dtypes, n))
    for n in ("float8_e4m3", "float8_e3m4", "float8_e4m3b11fnuz")
    if hasattr(ml_dtypes, n)
}
_SCALE_DTYPES = {np.dtype(NUMPY_DTYPES[k]) for k in SCALE_CODES}
#: the ml_dtypes types np.save writes as a 1-byte void ('<V1'): a file name must say which.
_ONE_BYTE = {
    n: np.dtype(getattr(ml_dtypes, n))
    for n in (
        "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3", "float8_e4m3b11fnuz",
        "float8_e5m2fnuz", "float8_e3m4", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn",
        "float4_e2m1fn", "int2", "int4", "uint2", "uint4",
    )
    if hasattr(ml_dtypes, n)
}  # fmt: skip


def read_safetensors_header(path: str | os.PathLike) -> SafetensorsHeader:
    """Read and validate a ``.safetensors`` header (see :mod:`fp8kit.study._safetensors`).

    Examples
    --------
    >>> import json, struct, tempfile, pathlib
    >>> h = json.dumps({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}})
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "w.safetensors"
    >>> _ = p.write_bytes(struct.pack("<Q", len(h)) + h.encode() + bytes(4))
    >>> [(e.name, e.dtype, e.shape) for e in read_safetensors_header(p).entries]
    [('w', 'BF16', (2,))]
    """
    return read_header(path)


def read_safetensors(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], list[str]]:
    """The float16/bfloat16/float32/float64 tensors of a ``.safetensors`` file (read-only
    views of a memory map) and the names of the tensors of other dtypes that were skipped.

    Raises
    ------
    StudyInputError
        If the file is not a well-formed safetensors file (one line: file, tensor, rule).

    Examples
    --------
    >>> import json, struct, tempfile, pathlib
    >>> h = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
    ...                 "i": {"dtype": "I32", "shape": [1], "data_offsets": [4, 8]}})
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "m.safetensors"
    >>> _ = p.write_bytes(struct.pack("<Q", len(h)) + h.encode() + b"\\0\\0\\x80?" + bytes(4))
    >>> read_safetensors(p)
    ({'w': array([1.], dtype=float32)}, ['i'])
    """
    header = read_header(path)
    buf = open_map(header)
    tensors: dict[str, np.ndarray] = {}
    skipped: list[str] = []
    for e in header.entries:
        if e.dtype in SAFETENSORS_FLOATS:
            tensors[e.name] = tensor_view(header, buf, e)
        else:
            skipped.append(e.name)
    return tensors, skipped


# ---------------------------------------------------------------- float8 with scales
def _pow2_block(n: int, s: int) -> int | None:
    b = 1
    while b < 2 * n:
        if -(-n // b) == s:
            return b
        b *= 2
    return None


def scale_blocks(shape: tuple[int, ...], scale_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Block size per axis of a scale of ``scale_shape`` over a tensor of ``shape``, or None
    when it does not fit.  One element: per tensor; fewer dims: trailing dims of 1 added
    (``(out,)`` over ``(out, in)`` is per output channel); per axis: the scale's length equals
    the tensor's (block 1), or is 1 (the whole axis), or is ``ceil(n / b)`` for a power of two
    ``b`` (blocks of DeepSeek-V3, MX, group quantization), or divides ``n`` (block ``n / s``).
    """
    n = len(shape)
    if math.prod(scale_shape) == 1:
        return tuple(max(d, 1) for d in shape)
    s = tuple(scale_shape)
    while len(s) > n and s[0] == 1:
        s = s[1:]
    if len(s) > n:
        return None
    s = s + (1,) * (n - len(s))
    blocks = []
    for w, k in zip(shape, s, strict=True):
        if k == w:
            blocks.append(1)
        elif k == 1:
            blocks.append(max(w, 1))
        else:
            b = _pow2_block(w, k)
            if b is None and k < w and w % k == 0:
                b = w // k
            if b is None:
                return None
            blocks.append(b)
    return tuple(blocks)


def _exact_work_dtype(codes_dtype: np.dtype, scale: np.ndarray | None) -> np.dtype:
    """float32 when every product of a float8 value and a scale is a float32, else float64."""
    f32 = np.dtype(np.float32)
    if scale is None:
        return f32
    u = np.unique(np.abs(scale[np.isfinite(scale)]))
    grid = np.arange(256, dtype=np.uint8).view(codes_dtype).astype(np.float64)
    for g in np.unique(np.abs(grid[np.isfinite(grid) & (grid != 0)])):
        p = u * g
        if not np.array_equal(p.astype(f32).astype(np.float64), p):
            return np.dtype(np.float64)
    return f32


class ScaledFloat8:
    """A float8 tensor of a checkpoint, decoded exactly (times its companion scale, when it
    has one) when indexed or converted with :func:`numpy.asarray`; the codes stay memory-mapped.

    Parameters
    ----------
    codes : ndarray
        The float8 codes (an ml_dtypes float8 dtype), e.g. a memory-mapped view.
    scale : ndarray, optional
        The dequantization multiplier (value = code's value * scale), broadcast per
        :func:`scale_blocks`.
    scale_name : str, optional
        The scale tensor's name (for reports).

    Attributes
    ----------
    dtype : numpy.dtype
        float32 when every product of a float8 value and the scale is exactly a float32
        (always without a scale), else float64.
    source_dtype : str
        The float8 dtype's name.

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> from fp8kit.study.io import ScaledFloat8
    >>> codes = np.array([[1.0, -2.0], [0.5, 448.0]], ml_dtypes.float8_e4m3fn)
    >>> t = ScaledFloat8(codes, np.array([[0.5], [2.0]], np.float32))
    >>> np.asarray(t).tolist(), t.dtype
    ([[0.5, -1.0], [1.0, 896.0]], dtype('float32'))
    >>> t[1:, 1:]
    array([[896.]], dtype=float32)
    """

    def __init__(
        self, codes: np.ndarray, scale: np.ndarray | None = None, scale_name: str | None = None
    ) -> None:
        if np.dtype(codes.dtype) not in _FLOAT8_DTYPES:
            raise TypeError(f"ScaledFloat8: codes must have a float8 dtype; got {codes.dtype}")
        self.codes = codes
        self.shape: tuple[int, ...] = tuple(codes.shape)
        self.ndim, self.size = codes.ndim, codes.size
        self.source_dtype = np.dtype(codes.dtype).name
        self.scale_name = scale_name
        self.blocks: tuple[int, ...] | None = None
        self.scale: np.ndarray | None = None
        if scale is not None:
            sc = np.asarray(scale).astype(np.float64)
            blocks = scale_blocks(self.shape, sc.shape)
            if blocks is None:
                raise ValueError(
                    f"ScaledFloat8: scale of shape {sc.shape} does not fit a tensor of shape "
                    f"{self.shape}"
                )
            grid = tuple(-(-max(n, 1) // b) for n, b in zip(self.shape, blocks, strict=True))
            self.scale = sc.reshape(grid)
            self.blocks = blocks
        self.dtype = _exact_work_dtype(np.dtype(codes.dtype), self.scale)
        self._lut = np.arange(256, dtype=np.uint8).view(codes.dtype).astype(self.dtype)

    def __repr__(self) -> str:
        with_scale = f" * {self.scale_name or 'scale'}" if self.scale is not None else ""
        return f"ScaledFloat8({self.source_dtype}{with_scale}, shape={self.shape})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[...]
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        keys = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis for k in keys):
            i = next(j for j, k in enumerate(keys) if k is Ellipsis)
            keys = keys[:i] + (slice(None),) * (self.ndim - len(keys) + 1) + keys[i + 1 :]
        keys = keys + (slice(None),) * (self.ndim - len(keys))
        if len(keys) != self.ndim or not all(
            isinstance(k, slice) or (isinstance(k, (int, np.integer)) and not isinstance(k, bool))
            for k in keys
        ):
            raise TypeError(
                f"ScaledFloat8: only basic indexing (ints, slices, ...) is supported; got {key!r}"
            )
        codes = np.asarray(self.codes[keys])
        out = self._lut.take(codes.view(np.uint8))  # decoding a code is a table lookup
        if self.scale is None:
            return out
        s, kept, runs = self.scale, [], None
        last = self.ndim - 1
        for ax, (k, n, b) in enumerate(zip(keys, self.shape, self.blocks, strict=True)):
            if s.shape[ax] > 1:  # a scale of length 1 along an axis broadcasts
                idx = np.atleast_1d(np.arange(n)[k]) // b
                if ax == last and b >= 8 and isinstance(k, slice) and idx.size > 1:
                    # blocks along the last axis: scale each run of one block in place
                    # rather than expanding the scale to the tensor's size
                    cut = np.flatnonzero(np.diff(idx)) + 1
                    runs = (np.r_[0, cut], np.r_[cut, idx.size], idx)
                else:
                    s = np.take(s, idx, axis=ax)
            if isinstance(k, slice):
                kept.append(s.shape[ax])
        s = s.reshape(kept).astype(self.dtype)  # int keys drop their axes
        if runs is None:
            np.multiply(out, s, out=out)
            return out
        for start, stop in zip(*runs[:2], strict=True):
            block = runs[2][start]
            np.multiply(out[..., start:stop], s[..., block : block + 1], out=out[..., start:stop])
        return out


# ---------------------------------------------------------------- names and order
_INT = re.compile(r"\d+")


def checkpoint_order(names: Sequence[str]) -> list[str]:
    """``names`` (in the checkpoint's order) with numbered siblings in numeric order.

    Names are paths split at ``.``.  Siblings (segments under the same prefix) keep the
    order of their first appearance, except that segments that are whole decimal numbers
    (layer indices) come in numeric order, together, where the first of them appeared.  So
    ``layers.8`` comes before ``layers.10``, and within a layer the checkpoint's own order
    of ``self_attn``, ``mlp``, ... is kept.  Duplicate names keep their relative order.

    Examples
    --------
    >>> from fp8kit.study.io import checkpoint_order
    >>> checkpoint_order(["emb", "layers.10.q", "layers.10.k", "layers.9.q", "layers.9.k",
    ...                   "norm"])
    ['emb', 'layers.9.q', 'layers.9.k', 'layers.10.q', 'layers.10.k', 'norm']
    """
    first: dict[tuple[str, ...], dict[str, int]] = {}
    numeric_at: dict[tuple[str, ...], int] = {}
    keys = []
    for name in names:
        parts = name.split(".")
        key = []
        for i, seg in enumerate(parts):
            parent = tuple(parts[:i])
            children = first.setdefault(parent, {})
            if _INT.fullmatch(seg):
                if parent not in numeric_at:
                    numeric_at[parent] = len(children)
                    children["\0numbers"] = len(children)
                key.append((numeric_at[parent], int(seg), seg))
            else:
                rank = children.setdefault(seg, len(children))
                key.append((rank, 0, ""))
        keys.append(tuple(key))
    order = sorted(range(len(names)), key=lambda i: keys[i])
    return [names[i] for i in order]


# ---------------------------------------------------------------- files
@dataclasses.dataclass
class _Item:
    name: str
    file: str
    array: Any  # ndarray (possibly an ml_dtypes dtype) or None for packed sub-byte dtypes
    dtype: str  # a readable dtype name


def _natural_key(text: str):
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text)]


def _npy_header(path: Path) -> tuple[dict[str, Any], int]:
    with open_regular(path) as fh:
        return _read_npy_header(fh, f"{path}: cannot read as .npy")


def _read_npy_header(fh: Any, where: str) -> tuple[dict[str, Any], int]:
    """The header dict of the .npy data at ``fh``'s position (shape a tuple of ints) and
    its length in bytes; errors start with ``where``."""
    magic = fh.read(8)
    if len(magic) < 8 or magic[:6] != b"\x93NUMPY":
        raise StudyInputError(f"{where} (not an .npy file)")
    major = magic[6]
    nlen = 2 if major == 1 else 4
    raw = fh.read(nlen)
    if len(raw) != nlen:
        raise StudyInputError(f"{where} (truncated header)")
    hlen = int.from_bytes(raw, "little")
    if hlen > 1 << 20:
        raise StudyInputError(f"{where} (header of {hlen} bytes)")
    text = fh.read(hlen)
    try:
        d = ast.literal_eval(text.decode("latin1" if major < 3 else "utf8"))
        if not isinstance(d, dict) or not {"descr", "shape", "fortran_order"} <= set(d):
            raise ValueError("not a header")
        shape = tuple(int(s) for s in d["shape"])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise StudyInputError(f"{where} (malformed header)") from None
    if any(s < 0 for s in shape):
        raise StudyInputError(f"{where} (negative shape {shape})")
    d["shape"] = shape
    return d, 8 + nlen + hlen


def _ml_dtype_of_npy(path: Path, descr: Any) -> tuple[np.dtype, str] | None:
    """The ml_dtypes dtype np.save wrote as ``descr`` (and the tensor name), or None when
    ``descr`` is a plain numpy dtype.  '<V2' / '|V2': bfloat16 (the only 2-byte one);
    '<f1': float8_e5m2; '<V1': one of 14 types: the name must end in '.<dtype>'."""
    stem = path.name[: -len(".npy")]
    if descr in ("<V2", "|V2"):
        return np.dtype(ml_dtypes.bfloat16), stem
    if descr == "<f1":
        return np.dtype(ml_dtypes.float8_e5m2), stem
    if descr in ("<V1", "|V1"):
        base, _, hint = stem.rpartition(".")
        if base and hint in _ONE_BYTE:
            return _ONE_BYTE[hint], base
        raise StudyInputError(
            f"{path}: dtype {descr!r} is one of the 1-byte ml_dtypes types "
            f"({', '.join(_ONE_BYTE)}); name the file NAME.<dtype>.npy "
            "(e.g. w.float8_e4m3fn.npy) to say which"
        )
    return None


def _read_npy(path: Path) -> list[_Item]:
    d, offset = _npy_header(path)
    found = _ml_dtype_of_npy(path, d["descr"])
    if found is None:
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as exc:
            raise StudyInputError(f"{path}: cannot read as .npy ({exc})") from None
        return [_Item(path.stem, str(path), arr, _dtype_name(arr.dtype))]
    dt, name = found
    need = offset + math.prod(d["shape"]) * dt.itemsize
    size = path.stat().st_size
    if size < need:
        raise StudyInputError(
            f"{path}: cannot read as .npy ({size} bytes; the header needs {need})"
        )
    if math.prod(d["shape"]) == 0:
        arr = np.zeros(d["shape"], dt)
    else:
        order = "F" if d["fortran_order"] else "C"
        arr = np.memmap(path, dtype=dt, mode="r", offset=offset, shape=d["shape"], order=order)
    return [_Item(name, str(path), arr, _dtype_name(dt))]


def _read_npz(path: Path) -> list[_Item]:
    """The arrays of an ``.npz`` file, each checked before it is read: its header against
    the member's size, a compressed member's size against :data:`NPZ_MEMBER_LIMIT`
    (members stored uncompressed, as ``np.savez`` writes them, are memory-mapped)."""
    try:
        with open_regular(path) as fh, zipfile.ZipFile(fh) as zf:
            size = os.fstat(fh.fileno()).st_size
            seen: set[str] = set()
            items = []
            for info in zf.infolist():
                key = info.filename.removesuffix(".npy")
                if key in seen:
                    raise StudyInputError(
                        f"{path}: cannot read as .npz (member {short_name(key)} appears twice)"
                    )
                seen.add(key)
                if info.is_dir() or not info.filename.endswith(".npy"):
                    items.append(_Item(key, str(path), None, "not an array"))
                    continue
                items.append(_npz_member(path, fh, size, zf, info, key))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        if isinstance(exc, StudyInputError):
            raise
        raise StudyInputError(f"{path}: cannot read as .npz ({exc})") from None
    except (RuntimeError, NotImplementedError) as exc:  # encrypted; unknown compression
        raise StudyInputError(f"{path}: cannot read as .npz ({exc})") from None
    return items


def _npz_dtype(d: dict[str, Any]) -> np.dtype | None:
    """The dtype of an .npz member's header (bfloat16 for the 'V2' np.savez writes of it);
    None for what is not numeric data (objects need pickle; '<f1' is no numpy dtype)."""
    try:
        dt = np.lib.format.descr_to_dtype(d["descr"])
    except (ValueError, TypeError, KeyError):
        return None
    if dt.hasobject:
        return None
    return np.dtype(ml_dtypes.bfloat16) if dt == np.dtype("V2") else dt


def _npz_member(path: Path, fh: Any, size: int, zf: zipfile.ZipFile, info: zipfile.ZipInfo,
                key: str) -> _Item:  # fmt: skip
    where = f"{path}: member {short_name(key)}"
    with zf.open(info) as member:
        d, hlen = _read_npy_header(member, f"{where}: cannot read as .npy")
    dt = _npz_dtype(d)
    if dt is None:
        return _Item(key, str(path), None, "unreadable")
    shape = d["shape"]
    nbytes = math.prod(shape) * dt.itemsize
    if hlen + nbytes != info.file_size:
        raise StudyInputError(
            f"{where}: its header says shape {list(shape)} of {_dtype_name(dt)} "
            f"({nbytes} bytes), but the member holds {info.file_size - hlen} bytes of data"
        )
    order = "F" if d["fortran_order"] else "C"
    if nbytes == 0:
        arr = np.zeros(shape, dt, order=order)
    elif info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1:
        # stored: the data lie in the file as they are, after the member's local header
        fh.seek(info.header_offset)
        local = fh.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise StudyInputError(f"{where}: cannot read as .npz (bad local header)")
        start = info.header_offset + 30 + int.from_bytes(local[26:28], "little")
        start += int.from_bytes(local[28:30], "little") + hlen
        if start + nbytes > size:
            raise StudyInputError(f"{where}: cannot read as .npz (runs past the end of the file)")
        if start % dt.alignment == 0:
            arr = np.memmap(path, dtype=dt, mode="r", offset=start, shape=shape, order=order)
        else:  # (the zip headers left the data unaligned, which the kernels refuse: a copy,
            # of bytes the file really holds)
            arr = np.empty(shape, dt, order=order)
            fh.seek(start)
            _read_into(fh, arr, nbytes, where)
    else:
        if info.file_size > NPZ_MEMBER_LIMIT:
            raise StudyInputError(
                f"{where}: {info.file_size} bytes compressed into {info.compress_size} is "
                f"larger than the {NPZ_MEMBER_LIMIT} bytes a compressed .npz member may "
                "have (it is decompressed into memory); save it uncompressed (np.savez, "
                "read memory-mapped), or as .npy or .safetensors"
            )
        arr = np.empty(shape, dt, order=order)
        with zf.open(info) as member:
            member.read(hlen)
            _read_into(member, arr, nbytes, where)
    return _Item(key, str(path), arr, _dtype_name(dt))


def _read_into(fh: Any, arr: np.ndarray, nbytes: int, where: str) -> None:
    """``nbytes`` from ``fh`` into the contiguous ``arr`` (no second copy of the data)."""
    view = memoryview(arr.reshape(-1, order="A").view(np.uint8))
    got = 0
    while got < nbytes:
        n = fh.readinto(view[got : got + (64 << 20)])
        if not n:
            raise StudyInputError(f"{where}: cannot read as .npz (truncated data)")
        got += n


def _read_st(path: Path, names: Iterable[str] | None = None) -> list[_Item]:
    header = read_header(path)
    buf = open_map(header)
    by_name = {e.name: e for e in header.entries}
    if names is None:
        entries = list(header.entries)
    else:
        missing = [n for n in names if n not in by_name]
        if missing:
            raise StudyInputError(
                f"{path}: has no tensor {short_name(missing[0])}, which the index maps to it"
            )
        entries = [by_name[n] for n in names]
    out = []
    for e in entries:
        arr = tensor_view(header, buf, e) if e.dtype in NUMPY_DTYPES else None
        out.append(
            _Item(e.name, str(path), arr, e.dtype if arr is None else _dtype_name(arr.dtype))
        )
    return out


def _read_index(path: Path) -> list[_Item]:
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_INDEX_SIZE:
            raise StudyInputError(
                f"{path}: not a safetensors index ({size} bytes; an index has at most "
                f"{MAX_INDEX_SIZE})"
            )
        raw = fh.read(MAX_INDEX_SIZE + 1)
    try:
        doc = json.loads(raw, object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError, _Duplicate) as exc:
        raise StudyInputError(f"{path}: not a safetensors index ({exc})") from None
    except RecursionError:  # (json's parser recurses per nesting level)
        raise StudyInputError(f"{path}: not a safetensors index (JSON nested too deeply)") from None
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
        raise StudyInputError(
            f'{path}: not a safetensors index (no "weight_map" of tensor names to shard files)'
        )
    shards: dict[str, list[str]] = {}
    for name, shard in wm.items():
        shards.setdefault(shard, []).append(name)
    items: dict[str, _Item] = {}
    for shard, names in shards.items():
        p = Path(shard)
        if p.is_absolute() or ".." in p.parts or p.name != shard or not shard:
            raise StudyInputError(
                f"{path}: shard {short_name(shard)} is not a file name beside the index"
            )
        if not shard.lower().endswith(".safetensors"):
            raise StudyInputError(
                f"{path}: shard {short_name(shard)} is not a .safetensors file (only "
                "safetensors checkpoints are read)"
            )
        f = path.parent / shard
        if not f.is_file():
            raise StudyInputError(
                f"{path}: shard {f} (of tensor {short_name(names[0])}) is missing"
            )
        for it in _read_st(f, names):
            items[it.name] = it
    return [items[n] for n in wm]


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _Duplicate(f"duplicate key {short_name(dup)}")
    return d


def _read_file(p: Path) -> list[_Item]:
    suffix = p.suffix.lower()
    if suffix == ".npy":
        return _read_npy(p)
    if suffix == ".npz":
        return _read_npz(p)
    if suffix == ".json":
        return _read_index(p)
    return _read_st(p)


def _expand(arg: str | os.PathLike) -> list[Path]:
    """The files one input names: a file, or a directory's index files, else its
    .safetensors/.npz/.npy files (natural order of the names)."""
    p = Path(arg)
    if not p.exists():
        raise StudyInputError(f"{p}: no such file")
    if p.is_dir():
        visible = [f for f in p.iterdir() if f.is_file() and not f.name.startswith(".")]
        indexes = [f for f in visible if f.name.lower().endswith(".safetensors.index.json")]
        files = indexes or [
            f for f in visible if f.suffix.lower() in (".safetensors", ".npz", ".npy")
        ]
        if not files:
            raise StudyInputError(
                f"{p}: a directory without *.safetensors.index.json, .safetensors, .npz or "
                ".npy files"
            )
        return sorted(files, key=lambda f: _natural_key(f.name))
    _check_regular(p)
    suffix = p.suffix.lower()
    if suffix not in SUFFIXES:
        raise StudyInputError(
            f"{p}: unsupported file type {p.suffix or '(none)'!r}; expected .npy, .npz, "
            ".safetensors, a *.safetensors.index.json or a directory"
        )
    return [p]


def _check_regular(p: Path) -> None:
    """A StudyInputError unless ``p`` is a regular file (after symlinks): a FIFO named
    ``p.safetensors`` would block the study for ever, a device feed it without end."""
    mode = p.stat().st_mode
    if not stat.S_ISREG(mode):
        raise not_regular(p, mode)


def _dtype_name(dt: np.dtype) -> str:
    dt = np.dtype(dt)
    return dt.name if dt.names is None else str(dt)


# ---------------------------------------------------------------- the inputs of a study
@dataclasses.dataclass
class StudyInputs:
    """What :func:`load_inputs` found.

    Attributes
    ----------
    tensors : dict of str to array
        The tensors to study, in study order: memory-mapped ndarrays (float16, bfloat16,
        float32, float64) and :class:`ScaledFloat8` (float8 tensors, decoded on access).
    files : dict of str to str
        The file (shard) each tensor was read from.
    scales : dict of str to str
        The companion scale tensor applied to each scaled float8 tensor.
    skipped : dict of str to str
        Tensors not studied, with the reason (their dtype, "scale", or a filter).
    sources : list of str
        Every file read (index files and their shards included), in the order read.
    """

    tensors: dict[str, Any]
    files: dict[str, str]
    scales: dict[str, str]
    skipped: dict[str, str]
    sources: list[str] = dataclasses.field(default_factory=list)


def _is_float(arr: Any) -> bool:
    if arr is None:
        return False
    dt = np.dtype(arr.dtype)
    return dt in DATA_DTYPES or (dt.kind == "f" and dt.newbyteorder("=") in DATA_DTYPES)


_SCALE_NAME = re.compile(r"_scale(?:_inv)?(?:_\d+)?$")


def _scale_stem(name: str) -> str | None:
    """``w`` for ``w_scale``, ``w_scale_inv``, ``w_scale_2``; None for other names."""
    m = _SCALE_NAME.search(name)
    return name[: m.start()] if m else None


def _group(items: list[_Item]) -> list[tuple[_Item, Any, str | None, str]]:
    """The items as (item, what to study or None, scale name, reason it is skipped)."""
    by_name: dict[str, _Item] = {}
    in_file: dict[tuple[str, str], _Item] = {}
    for it in items:
        by_name.setdefault(it.name, it)
        in_file.setdefault((it.file, it.name), it)
    has_float8 = any(it.array is not None and it.array.dtype in _FLOAT8_DTYPES for it in items)
    companions: dict[tuple[str, str], str] = {}  # (file, float8 name) -> scale name
    for it in items:
        if it.array is None or it.array.dtype not in _FLOAT8_DTYPES:
            continue
        # the scale in the same file, else anywhere in the checkpoint (another shard)
        found = [it.name + s for s in SCALE_SUFFIXES if (it.file, it.name + s) in in_file]
        found = found or [it.name + s for s in SCALE_SUFFIXES if it.name + s in by_name]
        if len(found) > 1:
            raise StudyInputError(
                f"{it.file}: float8 tensor {short_name(it.name)} has both "
                f"{' and '.join(short_name(f) for f in found)}; which scale applies is ambiguous"
            )
        if found:
            companions[it.file, it.name] = found[0]
    used = set(companions.values())
    out: list[tuple[_Item, Any, str | None, str]] = []
    for it in items:
        arr = it.array
        stem = _scale_stem(it.name)
        if it.name in used or (stem is not None and (has_float8 or stem in by_name)):
            out.append((it, None, None, "scale"))
        elif arr is not None and arr.dtype in _FLOAT8_DTYPES:
            sname = companions.get((it.file, it.name))
            scale = None
            if sname is not None:
                s_it = in_file.get((it.file, sname)) or by_name[sname]
                if s_it.array is None or np.dtype(s_it.array.dtype) not in _SCALE_DTYPES:
                    raise StudyInputError(
                        f"{s_it.file}: scale tensor {short_name(sname)} has dtype {s_it.dtype}; "
                        "a scale is float32, float16, bfloat16, float64 or float8_e8m0fnu"
                    )
                scale = s_it.array
                if scale_blocks(arr.shape, scale.shape) is None:
                    raise StudyInputError(
                        f"{it.file}: scale tensor {short_name(sname)} of shape "
                        f"{list(scale.shape)} does not fit float8 tensor {short_name(it.name)} "
                        f"of shape {list(arr.shape)} (per tensor, per channel or per block)"
                    )
            out.append((it, ScaledFloat8(arr, scale, sname), sname, ""))
        elif _is_float(arr):
            out.append((it, arr, None, ""))
        else:
            out.append((it, None, None, it.dtype))
    return out


def load_inputs(
    paths: Sequence[str | os.PathLike],
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> StudyInputs:
    """Find the tensors to study in files, directories and sharded checkpoints.

    Parameters
    ----------
    paths : sequence of str or path-like
        ``.npy``, ``.npz``, ``.safetensors`` files, ``*.safetensors.index.json`` indexes and
        directories (their index files, else their ``.safetensors``, ``.npz`` and ``.npy``
        files), in any mix.
    include, exclude : sequence of str
        Glob patterns (:func:`fnmatch.fnmatchcase`; ``*`` also matches dots) on the tensor
        names: with ``include``, only tensors matching one of them are studied; tensors
        matching one of ``exclude`` are not.

    Returns
    -------
    StudyInputs
        Tensors named as in their checkpoint, in :func:`checkpoint_order` of the names as
        the inputs list them (in the order given); a name found in several files is
        prefixed ``FILE:``.  A float8 tensor's scale is looked for in its file, then in
        every input.

    Raises
    ------
    StudyInputError
        One line for a missing, unreadable or malformed file, a scale that does not fit, or
        when no tensor is left to study.

    Examples
    --------
    >>> import numpy as np, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> np.savez(d / "m.npz", **{"layers.10.w": np.ones(2), "layers.9.w": np.ones(2),
    ...                          "ids": np.arange(2)})
    >>> got = load_inputs([d])
    >>> list(got.tensors), got.skipped
    (['layers.9.w', 'layers.10.w'], {'ids': 'int64'})
    """
    items: list[_Item] = []
    seen_files: set[Path] = set()
    sources: dict[str, None] = {}
    for arg in paths:
        for f in _expand(arg):
            key = f.resolve()
            if key in seen_files:  # the same file named twice (a directory and its shard)
                continue
            seen_files.add(key)
            sources[str(f)] = None
            try:
                found = _read_file(f)
            except OSError as exc:
                raise StudyInputError(f"{f}: {exc.strerror or exc}") from None
            items += found
            sources.update(dict.fromkeys(it.file for it in found))
    count: dict[str, int] = {}
    for it in items:
        count[it.name] = count.get(it.name, 0) + 1
    tensors: dict[str, Any] = {}
    files: dict[str, str] = {}
    scales: dict[str, str] = {}
    skipped: dict[str, str] = {}
    by_name: dict[str, list[tuple[_Item, Any, str | None, str]]] = {}
    for entry in _group(items):
        by_name.setdefault(entry[0].name, []).append(entry)
    for name in checkpoint_order(list(by_name)):
        for it, arr, sname, reason in by_name[name]:
            label = name if count[name] == 1 else f"{it.file}:{name}"
            if arr is None:
                skipped[label] = reason
            elif include and not any(fnmatch.fnmatchcase(name, g) for g in include):
                skipped[label] = "not included"
            elif any(fnmatch.fnmatchcase(name, g) for g in exclude):
                skipped[label] = "excluded"
            else:
                tensors[label] = arr
                files[label] = it.file
                if sname is not None:
                    scales[label] = sname
    if not tensors:
        where = ", ".join(str(p) for p in paths)
        what = (
            "no tensors match the --include/--exclude filters"
            if (include or exclude)
            and any(r in ("not included", "excluded") for r in skipped.values())
            else ("no floating-point tensors (float16, bfloat16, float32, float64, float8)")
        )
        kinds = sorted({r for r in skipped.values()})
        raise StudyInputError(
            f"{where}: {what}" + (f"; skipped: {', '.join(kinds)}" if kinds else "")
        )
    return StudyInputs(tensors, files, scales, skipped, list(sources))


def load_tensors(
    path: str | os.PathLike, *, prefix: str = ""
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The floating-point tensors of one file, by name, and the names skipped.

    ``.npy``: one tensor named after the file's stem; ``.npz`` and ``.safetensors``: every
    float16, bfloat16, float32 and float64 array, by key (others are skipped).  Names get
    ``prefix`` in front.  (:func:`load_inputs` reads checkpoints, float8 and directories.)

    Raises
    ------
    StudyInputError
        A missing or unreadable file, an unknown suffix, or a file with no float tensors.
    """
    p = Path(path)
    if not p.exists():
        raise StudyInputError(f"{p}: no such file")
    if p.is_dir():
        raise StudyInputError(f"{p}: is a directory, not a file")
    _check_regular(p)
    suffix = p.suffix.lower()
    if suffix not in (".npy", ".npz", ".safetensors"):
        raise StudyInputError(
            f"{p}: unsupported file type {p.suffix or '(none)'!r}; expected .npy, .npz, "
            ".safetensors"
        )
    try:
        items = _read_file(p)
    except OSError as exc:
        raise StudyInputError(f"{p}: {exc.strerror or exc}") from None
    tensors = {it.name: it.array for it in items if _is_float(it.array)}
    skipped = [it.name for it in items if it.name not in tensors]
    if not tensors:
        raise StudyInputError(
            f"{p}: no floating-point tensors (float16, bfloat16, float32, float64)"
            + (f"; skipped {', '.join(skipped)}" if skipped else "")
        )
    return {prefix + k: v for k, v in tensors.items()}, [prefix + s for s in skipped]


# ------------------------------------------------- layer inputs (fp8kit study --activations)
_SYNTHETIC = re.compile(r"^synthetic:(\d+)$")


def load_activations(
    source: str | os.PathLike, weights: dict[str, Any], *, seed: int = 0
) -> dict[str, np.ndarray]:
    """The input samples (tokens, K) of every 2-D weight (out_features, K) of ``weights``.

    ``source`` is a ``.npy``, ``.npz`` or ``.safetensors`` file whose tensors are named
    after the weights they feed (a ``FILE:`` prefix of a weight's name may be left out),
    each of shape (tokens, K) or (..., K), flattened to (tokens, K); a file of one tensor
    pairs with the only 2-D weight whatever their names.  ``synthetic:N`` draws N seeded
    tokens per weight (:func:`synthetic_activations`).

    Raises
    ------
    StudyInputError
        An unreadable file, a spec that is neither a file nor ``synthetic:N``, no 2-D
        weight, a weight without samples (named), or samples whose K differs from the
        weight's (both shapes named).
    """

    text = os.fspath(source)
    shapes = {n: tuple(w.shape) for n, w in weights.items() if len(w.shape) == 2}
    if not shapes:
        raise StudyInputError(
            f"--activations {text}: no 2-D tensor among the inputs (weights are (out_features, K))"
        )
    if text.startswith("synthetic"):
        m = _SYNTHETIC.match(text)
        if m is None or int(m.group(1)) < 1:
            raise StudyInputError(
                f"--activations {text!r}: expected synthetic:N with N a positive number of "
                "tokens, or a .npy, .npz or .safetensors file"
            )
        n = int(m.group(1))
        return {name: synthetic_activations(name, s[1], n, seed) for name, s in shapes.items()}
    tensors, skipped = load_tensors(text)
    single = next(iter(tensors.values())) if len(tensors) == 1 and len(shapes) == 1 else None
    out = {}
    for name, (rows, k) in shapes.items():
        key = name if name in tensors else name.rsplit(":", 1)[-1]
        if key in tensors:
            x = tensors[key]
        elif single is not None:
            x, key = single, next(iter(tensors))
        else:
            why = (
                f"its tensor {key!r} is not float16, bfloat16, float32 or float64 data"
                if key in skipped
                else "no tensor of that name"
            )
            shown = ", ".join(list(tensors)[:5]) + (", ..." if len(tensors) > 5 else "")
            raise StudyInputError(
                f"--activations {text}: no input samples for weight {name!r}: {why} (it has "
                f"{shown}); leave the weight out with --exclude"
            )
        shape = tuple(x.shape)
        if not shape or shape[-1] != k:
            raise StudyInputError(
                f"--activations {text}: samples {key!r} have shape {shape} but weight "
                f"{name!r} has shape {(rows, k)}: the last dimensions (K) must match"
            )
        out[name] = np.asarray(x).reshape(-1, k)
    return out


def synthetic_activations(name: str, k: int, tokens: int, seed: int = 0) -> np.ndarray:
    """Seeded stand-in inputs of one layer: ``tokens`` x ``k`` standard normal float32
    values with a few outlier channels (up to 4, one per 256 of K, 20x larger), the way
    LLM activations have a few channels of large magnitude.  The draw depends on the seed
    and the layer's name, not on the order of the layers."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    x = rng.standard_normal((tokens, k))
    outliers = rng.choice(k, size=min(4, max(1, k // 256)), replace=False)
    x[:, outliers] *= 20.0
    return x.astype(np.float32)
