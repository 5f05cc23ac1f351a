"""Reading the floating-point tensors of ``.npy``, ``.npz`` and ``.safetensors`` files.

The safetensors reader is our own (no dependency): an 8-byte little-endian header length,
a JSON header mapping tensor names to ``dtype``, ``shape`` and ``data_offsets`` (byte
offsets into the data that follows the header), then the raw little-endian data.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np

from ._arrays import DATA_DTYPES

__all__ = ["StudyInputError", "load_tensors", "read_safetensors"]

SUFFIXES = (".npy", ".npz", ".safetensors")

#: safetensors dtype codes of the floating types a study reads; other codes are skipped.
SAFETENSORS_FLOATS = {
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
}
_SAFETENSORS_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "U16": 2, "I16": 2,
    "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8,
}  # fmt: skip


class StudyInputError(ValueError):
    """A file that cannot be studied: missing, unreadable, malformed or without floats."""


def read_safetensors(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], list[str]]:
    """The float16/bfloat16/float32/float64 tensors of a ``.safetensors`` file (read-only
    views of a memory map) and the names of the tensors of other dtypes that were skipped.

    Raises
    ------
    StudyInputError
        If the file is not a well-formed safetensors file.
    """
    path = Path(path)
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < 8:
            raise StudyInputError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        n = int.from_bytes(fh.read(8), "little")
        if n > size - 8:
            raise StudyInputError(f"{path}: not a safetensors file (header length {n})")
        try:
            header = json.loads(fh.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StudyInputError(f"{path}: not a safetensors file ({exc})") from None
        if not isinstance(header, dict):
            raise StudyInputError(f"{path}: not a safetensors file (header is not an object)")
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else b""
    data_start = 8 + n
    tensors: dict[str, np.ndarray] = {}
    skipped: list[str] = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            code = info["dtype"]
            shape = [int(d) for d in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (TypeError, KeyError, ValueError):
            raise StudyInputError(f"{path}: malformed header entry for tensor {name!r}") from None
        itemsize = _SAFETENSORS_SIZES.get(code)
        count = math.prod(shape)
        if (
            itemsize is None
            or any(d < 0 for d in shape)
            or not 0 <= begin <= end <= size - data_start
            or end - begin != count * itemsize
        ):
            raise StudyInputError(
                f"{path}: tensor {name!r} has dtype {code!r}, shape {shape} and offsets "
                f"[{begin}, {end}] that do not fit the file"
            )
        dt = SAFETENSORS_FLOATS.get(code)
        if dt is None:
            skipped.append(name)
            continue
        arr = np.frombuffer(buf, dtype=dt, count=count, offset=data_start + begin)
        tensors[name] = arr.reshape(shape)
    return tensors, skipped


def _float_arrays(items) -> tuple[dict[str, np.ndarray], list[str]]:
    tensors, skipped = {}, []
    for name, arr in items:
        if isinstance(arr, np.ndarray) and (
            arr.dtype in DATA_DTYPES or arr.dtype.newbyteorder("=") in DATA_DTYPES
        ):
            tensors[name] = arr
        else:
            skipped.append(name)
    return tensors, skipped


def _npz_items(path):
    try:
        with np.load(path, allow_pickle=False) as npz:
            for key in npz.files:
                try:
                    yield key, npz[key]
                except ValueError:  # object arrays need pickle: not tensors we study
                    yield key, None
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise StudyInputError(f"{path}: cannot read as .npz ({exc})") from None


def load_tensors(
    path: str | os.PathLike, *, prefix: str = ""
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The floating-point tensors of one file, by name, and the names skipped.

    ``.npy``: one tensor named after the file's stem; ``.npz`` and ``.safetensors``: every
    float16, bfloat16, float32 and float64 array, by key (others are skipped).  Names get
    ``prefix`` in front.

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
    suffix = p.suffix.lower()
    if suffix not in SUFFIXES:
        raise StudyInputError(
            f"{p}: unsupported file type {p.suffix or '(none)'!r}; expected {', '.join(SUFFIXES)}"
        )
    try:
        if suffix == ".npy":
            try:
                arr = np.load(p, mmap_mode="r", allow_pickle=False)
            except ValueError as exc:
                raise StudyInputError(f"{p}: cannot read as .npy ({exc})") from None
            tensors, skipped = _float_arrays([(p.stem, arr)])
        elif suffix == ".npz":
            tensors, skipped = _float_arrays(_npz_items(p))
        else:
            tensors, skipped = read_safetensors(p)
    except OSError as exc:
        raise StudyInputError(f"{p}: {exc.strerror or exc}") from None
    if not tensors:
        raise StudyInputError(
            f"{p}: no floating-point tensors (float16, bfloat16, float32, float64)"
            + (f"; skipped {', '.join(skipped)}" if skipped else "")
        )
    return {prefix + k: v for k, v in tensors.items()}, [prefix + s for s in skipped]
