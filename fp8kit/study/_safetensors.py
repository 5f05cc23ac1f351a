"""A strict, dependency-free ``.safetensors`` reader: the header is validated exactly as the
reference implementation (the ``safetensors`` package, 0.8) validates it, and tensors are
read-only views of a memory map.

The format: an 8-byte little-endian header length ``n``, ``n`` bytes of UTF-8 JSON, then the
data buffer.  The header is a JSON object mapping tensor names to ``{"dtype", "shape",
"data_offsets"}`` (offsets relative to the start of the data buffer), plus an optional
``"__metadata__"`` map of strings to strings.

The rules the reference enforces, and this reader with it (each found by feeding files to the
reference; ``tests/test_study_safetensors.py`` checks the two agree on generated and mutated
headers):

- the file is at least 8 bytes; ``n <= 100_000_000`` and ``8 + n <= file size``;
- the header is valid UTF-8 and strict JSON (serde_json's): no NaN/Infinity, no lone
  surrogate escapes, numbers that overflow a float64 refused, at most 127 nested
  arrays/objects, only space, tab, CR and LF as whitespace;
- the top level is an object; ``__metadata__`` appears at most once and is ``null`` or an
  object whose values are all strings;
- a tensor entry is an object with ``dtype``, ``shape`` and ``data_offsets`` each exactly once
  (other keys are ignored, as the reference ignores them) or an array of exactly those three
  values in that order (serde reads a struct from either);
- ``dtype`` is one of :data:`DTYPE_BITS` (or serde's enum spelling ``{"F32": null}``);
  ``shape`` is an array and ``data_offsets`` an array of two, of integers in
  ``[0, 2**64 - 1]`` (no floats, no ``-0``, no booleans);
- the element count, and the bit count (count times the dtype's bits), fit in 64 bits as
  the shape is multiplied out left to right; the bit count is a multiple of 8 (the sub-byte
  dtypes ``F4``, ``F6_E2M3`` and ``F6_E3M2`` are packed, so e.g. an odd number of ``F4``
  elements is refused) and ``end - begin`` equals it divided by 8;
- sorted by ``(begin, end)``, the tensors tile the data buffer from 0 without gaps or
  overlaps, and the buffer ends exactly at the end of the file.

One deliberate difference: the reference silently keeps one of two tensors of the same name;
this reader refuses duplicate tensor names (which tensor another tool would read is anybody's
guess).

Every refusal is a :class:`StudyInputError` of one line naming the file, the tensor (where
there is one) and the rule.  Nothing is allocated from a size read from the file before that
size has been checked against the file.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import re
import stat
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "DTYPE_BITS",
    "MAX_HEADER_SIZE",
    "NUMPY_DTYPES",
    "SafetensorsEntry",
    "SafetensorsHeader",
    "StudyInputError",
    "open_regular",
    "read_header",
    "tensor_view",
]


class StudyInputError(ValueError):
    """A file that cannot be studied: missing, unreadable, malformed or without floats."""


def _kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):  # fmt: skip
        if test(mode):
            return what
    return "not a regular file"


def not_regular(path: str | os.PathLike, mode: int) -> StudyInputError:
    """The error for a path that is not a regular file (``mode`` from its stat)."""
    return StudyInputError(
        f"{os.fspath(path)}: is {_kind(mode)}, not a regular file (only regular files are read)"
    )


def open_regular(path: str | os.PathLike):
    """``path`` opened for binary reading, when it is a regular file.

    Opened without blocking, then checked: a FIFO named like a checkpoint would block an
    ordinary ``open`` until a writer came (for ever), and a device would be read without
    end.

    Raises
    ------
    StudyInputError
        If ``path`` is a directory, FIFO, device or socket.
    OSError
        If it cannot be opened.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular(path, mode)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


#: The reference's header length limit (bytes).
MAX_HEADER_SIZE = 100_000_000
#: serde_json's nesting limit as the reference meets it (containers, the top level included).
MAX_DEPTH = 127
_U64 = 2**64 - 1

#: Bits per element of every dtype code the reference knows (0.8).
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
    "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
    "U64": 64,
}  # fmt: skip

#: numpy (or ml_dtypes) dtype of each code whose elements are whole bytes.
NUMPY_DTYPES = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype("u1"), "I8": np.dtype("i1"),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "F8_E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "F8_E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz), "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"), "F16": np.dtype("<f2"), "BF16": np.dtype(ml_dtypes.bfloat16),
    "I32": np.dtype("<i4"), "U32": np.dtype("<u4"), "F32": np.dtype("<f4"),
    "C64": np.dtype("<c8"), "F64": np.dtype("<f8"), "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
}  # fmt: skip

_FIELDS = ("dtype", "shape", "data_offsets")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclasses.dataclass(frozen=True)
class SafetensorsEntry:
    """One tensor of a header: its name, dtype code, shape and byte range in the data buffer."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclasses.dataclass(frozen=True)
class SafetensorsHeader:
    """A validated header: the entries in the file's header order, the metadata (None when
    absent or null), where the data buffer starts, and the file size."""

    path: Path
    entries: tuple[SafetensorsEntry, ...]
    metadata: dict[str, str] | None
    data_start: int
    size: int


class _Refused(Exception):
    """A header rule broken; carries the tensor (or None) and the rule."""

    def __init__(self, rule: str, tensor: str | None = None) -> None:
        super().__init__(rule)
        self.rule, self.tensor = rule, tensor


class _Obj(dict):
    """A JSON object that remembers its key/value pairs in order, duplicates included."""

    __slots__ = ("pairs",)


def _object(pairs: list[tuple[str, Any]]) -> _Obj:
    obj = _Obj(pairs)
    obj.pairs = pairs
    return obj


def _parse_int(text: str) -> int | float:
    # serde_json: integers in [-2**63, 2**64 - 1] are integers, "-0" and anything larger
    # are floats, and a float that overflows is an error ("number out of range").
    if text != "-0" and len(text) <= 21:
        v = int(text)
        if -(2**63) <= v <= _U64:
            return v
    return _parse_float(text)


def _parse_float(text: str) -> float:
    v = float(text)
    if v in (float("inf"), float("-inf")):
        raise _Refused(
            f"header holds a number out of range ({text[:20]}{'...' if len(text) > 20 else ''})"
        )
    return v


def _parse_constant(text: str) -> Any:
    raise _Refused(f"header is not valid JSON ({text} is not a JSON value)")


def _check_strings_and_depth(value: Any, depth: int) -> None:
    """Lone surrogates (Python's json reads them, serde_json refuses them) and nesting."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise _Refused("header holds a string with a lone UTF-16 surrogate escape")
    elif isinstance(value, (_Obj, list)):
        if depth > MAX_DEPTH:
            raise _Refused(f"header JSON nested deeper than {MAX_DEPTH} levels")
        items = value.pairs if isinstance(value, _Obj) else enumerate(value)
        for k, v in items:
            if isinstance(k, str) and _SURROGATE.search(k):
                raise _Refused("header holds a key with a lone UTF-16 surrogate escape")
            _check_strings_and_depth(v, depth + 1)


def _parse_json(text: bytes) -> Any:
    try:
        s = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Refused(f"header is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        doc = json.loads(
            s,
            object_pairs_hook=_object,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
        )
    except json.JSONDecodeError as exc:
        raise _Refused(f"header is not valid JSON ({exc.msg} at char {exc.pos})") from None
    except RecursionError:
        raise _Refused(f"header JSON nested deeper than {MAX_DEPTH} levels") from None
    if _needs_walk(s):
        _check_strings_and_depth(doc, 1)
    return doc


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_OPEN_CLOSE = np.zeros(256, np.int8)
_OPEN_CLOSE[[ord("["), ord("{")]] = 1
_OPEN_CLOSE[[ord("]"), ord("}")]] = -1


def _needs_walk(text: str) -> bool:
    """Whether the parsed header may hold a lone surrogate or nest too deeply: a surrogate
    escape in the text, or brackets outside strings nested more than MAX_DEPTH deep (the
    walk over the parsed header is what decides; this only spares it for usual headers)."""
    if _SURROGATE_ESCAPE.search(text):
        return True
    skeleton = _STRING.sub("", text).encode("ascii", "replace")
    steps = _OPEN_CLOSE[np.frombuffer(skeleton, np.uint8)]
    return bool(steps.size) and int(np.cumsum(steps, dtype=np.int64).max()) > MAX_DEPTH


def _dims(shape: tuple[int, ...]) -> str:
    text = str(list(shape))
    return text if len(text) <= 60 else text[:56] + "...]"


def _usize(value: Any, what: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        kind = {bool: "a boolean", float: "a float", str: "a string", type(None): "null"}.get(
            type(value), "not an integer"
        )
        raise _Refused(f"{what} must be integers; got {kind} ({value!r:.40})", name)
    if not 0 <= value <= _U64:
        raise _Refused(f"{what} must be integers in [0, 2**64 - 1]; got {value}", name)
    return value


def _dtype_code(value: Any, name: str) -> str:
    code = value
    if isinstance(value, _Obj):  # serde's enum spelling {"F32": null}
        if len(value.pairs) != 1 or value.pairs[0][1] is not None:
            raise _Refused(f"dtype {value!r:.60} is not a dtype code", name)
        code = value.pairs[0][0]
    if not isinstance(code, str):
        raise _Refused(f"dtype must be a string; got {value!r:.40}", name)
    if code not in DTYPE_BITS:
        raise _Refused(f"unknown dtype {code!r:.40}; known: {', '.join(DTYPE_BITS)}", name)
    return code


def _entry(name: str, value: Any) -> SafetensorsEntry:
    if isinstance(value, list):
        if len(value) != 3:
            raise _Refused(
                f"entry is an array of {len(value)} values, not [dtype, shape, data_offsets]",
                name,
            )
        dtype, shape, offsets = value
    elif isinstance(value, _Obj):
        fields: dict[str, Any] = {}
        for k, v in value.pairs:
            if k in _FIELDS:
                if k in fields:
                    raise _Refused(f"field {k!r} appears twice", name)
                fields[k] = v
        missing = [k for k in _FIELDS if k not in fields]
        if missing:
            raise _Refused(f"entry lacks {', '.join(missing)}", name)
        dtype, shape, offsets = (fields[k] for k in _FIELDS)
    else:
        raise _Refused(f"entry is not an object but {value!r:.40}", name)
    code = _dtype_code(dtype, name)
    if not isinstance(shape, list):
        raise _Refused(f"shape must be an array; got {shape!r:.40}", name)
    dims = tuple(_usize(d, "shape", name) for d in shape)
    if not isinstance(offsets, list) or len(offsets) != 2:
        raise _Refused(f"data_offsets must be an array of 2 integers; got {offsets!r:.40}", name)
    begin, end = (_usize(o, "data_offsets", name) for o in offsets)
    return SafetensorsEntry(name, code, dims, begin, end)


def _interpret(doc: Any) -> tuple[list[SafetensorsEntry], dict[str, str] | None]:
    if not isinstance(doc, _Obj):
        raise _Refused(f"header is not a JSON object but {type(doc).__name__}")
    entries: list[SafetensorsEntry] = []
    metadata = None
    seen: set[str] = set()
    for key, value in doc.pairs:
        if key in seen:
            if key == "__metadata__":
                raise _Refused("'__metadata__' appears twice")
            raise _Refused("the name appears twice in the header", key)
        seen.add(key)
        if key == "__metadata__":
            if value is None:
                continue
            if not isinstance(value, _Obj):
                raise _Refused(f"'__metadata__' must be a map of strings; got {value!r:.40}")
            for k, v in value.pairs:
                if not isinstance(v, str):
                    raise _Refused(f"'__metadata__' value of {k!r:.40} is not a string: {v!r:.40}")
            metadata = dict(value)
            continue
        entries.append(_entry(key, value))
    return entries, metadata


def _check_layout(entries: list[SafetensorsEntry]) -> int:
    """The reference's validation: (begin, end)-sorted entries tile [0, end) exactly."""
    start = 0
    for e in sorted(entries, key=lambda e: (e.begin, e.end)):
        if e.begin != start or e.end < e.begin:
            why = (
                "ends before it begins"
                if e.end < e.begin
                else ("overlaps the tensor before it" if e.begin < start else "leaves a gap")
            )
            raise _Refused(
                f"data_offsets [{e.begin}, {e.end}] {why} (the tensors must tile the data "
                f"buffer in order; this one should begin at byte {start})",
                e.name,
            )
        start = e.end
        count = 1
        for d in e.shape:
            count *= d
            if count > _U64:
                raise _Refused(f"shape {_dims(e.shape)} overflows 64 bits", e.name)
        bits = count * DTYPE_BITS[e.dtype]
        if bits > _U64:
            raise _Refused(f"shape {_dims(e.shape)} of {e.dtype} overflows 64 bits", e.name)
        if bits % 8:
            raise _Refused(
                f"{count} elements of {e.dtype} ({DTYPE_BITS[e.dtype]} bits) do not fill whole "
                "bytes",
                e.name,
            )
        if e.end - e.begin != bits // 8:
            raise _Refused(
                f"data_offsets [{e.begin}, {e.end}] span {e.end - e.begin} bytes, but shape "
                f"{_dims(e.shape)} of {e.dtype} needs {bits // 8}",
                e.name,
            )
    return start


def read_header(path: str | os.PathLike) -> SafetensorsHeader:
    """Read and validate the header of a ``.safetensors`` file (the data is not read).

    Parameters
    ----------
    path : str or path-like
        The file.

    Returns
    -------
    SafetensorsHeader
        The entries in header order, the metadata and where the data starts.

    Raises
    ------
    StudyInputError
        One line, ``"FILE: [tensor 'NAME': ]RULE"``, for a file the reference refuses (and
        for duplicate tensor names).
    OSError
        When the file cannot be opened or read.

    Examples
    --------
    >>> import json, struct, tempfile, pathlib
    >>> from fp8kit.study.io import read_safetensors_header
    >>> h = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "w.safetensors"
    >>> _ = p.write_bytes(struct.pack("<Q", len(h)) + h + bytes(8))
    >>> read_safetensors_header(p).entries
    (SafetensorsEntry(name='w', dtype='F32', shape=(2,), begin=0, end=8),)
    >>> _ = p.write_bytes(struct.pack("<Q", len(h)) + h + bytes(4))
    >>> read_safetensors_header(p)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fp8kit.study._safetensors.StudyInputError: ...w.safetensors: tensor 'w': data_offsets [0, 8] \
run past the end of the file (the data buffer holds 4 bytes)
    """
    path = Path(path)
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < 8:
            raise StudyInputError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        n = int.from_bytes(fh.read(8), "little")
        if n > MAX_HEADER_SIZE:
            raise StudyInputError(
                f"{path}: header length {n} exceeds the format's limit of {MAX_HEADER_SIZE} bytes"
            )
        if n > size - 8:
            raise StudyInputError(
                f"{path}: header length {n} runs past the end of the file ({size} bytes)"
            )
        text = fh.read(n)
    if len(text) != n:
        raise StudyInputError(f"{path}: file shrank while being read")
    try:
        entries, metadata = _interpret(_parse_json(text))
        data_size = size - 8 - n
        for e in entries:  # a clearer message than the tiling rule's for truncated files
            if e.end > data_size and e.end >= e.begin:
                raise _Refused(
                    f"data_offsets [{e.begin}, {e.end}] run past the end of the file (the data "
                    f"buffer holds {data_size} bytes)",
                    e.name,
                )
        end = _check_layout(entries)
        if end != data_size:
            raise _Refused(
                f"the tensors cover {end} bytes of a {data_size}-byte data buffer (the file "
                "has bytes no tensor covers)"
            )
    except _Refused as exc:
        where = f"tensor {short_name(exc.tensor)}: " if exc.tensor is not None else ""
        rule = " ".join(exc.rule.split())  # one line, whatever the file held
        raise StudyInputError(f"{path}: {where}{rule}") from None
    return SafetensorsHeader(path, tuple(entries), metadata, 8 + n, size)


def short_name(name: str, limit: int = 80) -> str:
    """repr of a name from a file, cut to about ``limit`` characters (it may be huge)."""
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def tensor_view(header: SafetensorsHeader, buf: Any, entry: SafetensorsEntry) -> np.ndarray:
    """The read-only array of one entry over ``buf`` (:func:`open_map`); packed sub-byte
    dtypes (F4, F6_*) come back as their raw bytes (uint8, 1-d)."""
    dt = NUMPY_DTYPES.get(entry.dtype)
    nbytes = entry.end - entry.begin
    if dt is None:
        return np.frombuffer(buf, np.uint8, count=nbytes, offset=header.data_start + entry.begin)
    try:
        if nbytes == 0:  # no view of 0 bytes at the very end of a buffer
            arr = np.zeros(entry.shape, dt)
            arr.flags.writeable = False
            return arr
        arr = np.frombuffer(
            buf, dt, count=nbytes // dt.itemsize, offset=header.data_start + entry.begin
        )
        return arr.reshape(entry.shape)
    except ValueError as exc:  # a shape numpy cannot hold (dimensions beyond 2**63)
        raise StudyInputError(
            f"{header.path}: tensor {short_name(entry.name)}: shape {_dims(entry.shape)} "
            "cannot be an "
            f"array here ({exc})"
        ) from None


def open_map(header: SafetensorsHeader) -> mmap.mmap:
    """A read-only memory map of the whole file, checked to still have the header's size."""
    with open_regular(header.path) as fh:
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    if len(buf) != header.size:
        buf.close()
        raise StudyInputError(f"{header.path}: file changed size while being read")
    return buf
