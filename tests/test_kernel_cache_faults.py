"""The native kernels' disk cache and entry under faults (issue 42): corrupt, truncated and
swapped cache files, a failed write, stale entries, a read-only or missing cache location,
a simulated Numba upgrade and racing first compiles.  Each ends in the right bits, never in
a crash, a failed import or a file left behind.

The cache files are those of :mod:`fp8kit._kernels.native` (``*.native`` under Numba's
cache location of the package, NUMBA_CACHE_DIR here).  Each process is a fresh
interpreter: what a process loads is decided at its first call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from fp8kit._kernels import native

# The work each process does: a native IR kernel (encode), a Numba-written kernel through
# the checked entry (the generic encode kernel), and a check of both against ml_dtypes.
_WORK = """
import json, warnings
import ml_dtypes, numpy as np
from numba.core import event
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with event.install_recorder("fp8kit:compile") as rec:
        import fp8kit
        from fp8kit._kernels import codec, native
        x = np.linspace(-440, 440, 4001, dtype=np.float32)
        want = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        codes = fp8kit.encode(x, "float8_e4m3fn")
        kernel, _ = codec.encode_kernel(fp8kit.get_format("float8_e4m3fn"), x.dtype, True,
                                        strategy="generic")
        fn = kernel.build()
        out = np.zeros(x.size, np.uint8)
        fn(x.view(np.uint32), fp8kit.codec._lut_for(0), codec.dummy(np.uint8), out, 1)
print(json.dumps({"ok": bool(np.array_equal(codes, want) and np.array_equal(out, want)),
                  "native": type(fn).__name__ == "NativeCall",
                  "compiled": len(rec.buffer) // 2,
                  "warnings": [str(w.message) for w in caught]}))
"""

# Makes every cache location unwritable, as a read-only install or container is (the
# tests run as root, for whom file modes do not forbid a write).
_READ_ONLY = """
import numba.core.caching as caching
def _refuse(self):
    raise OSError(30, "Read-only file system")
caching._CacheLocator.ensure_cache_path = _refuse
"""


def _run(cache_dir, prelude: str = "", check: bool = True) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    code = textwrap.dedent(prelude) + _WORK
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    if check:
        assert res.returncode == 0, res.stderr[-3000:]
        return json.loads(res.stdout.strip().splitlines()[-1])
    return res


def _files(cache_dir) -> list:
    return sorted(p for p in cache_dir.rglob("*") if p.is_file())


def _natives(cache_dir) -> list:
    return [p for p in _files(cache_dir) if p.suffix == ".native"]


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A cache filled by one process (the bytes of its files, to restore them)."""
    folder = tmp_path_factory.mktemp("warm")
    first = _run(folder)
    assert first["ok"] and first["native"] and first["compiled"] > 0
    return {p.relative_to(folder): p.read_bytes() for p in _natives(folder)}


def _fill(tmp_path, warm):
    for rel, data in warm.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    return [tmp_path / rel for rel in warm]


def test_a_warm_cache_loads_everything(tmp_path, warm):
    _fill(tmp_path, warm)
    res = _run(tmp_path)
    assert res == {"ok": True, "native": True, "compiled": 0, "warnings": []}


@pytest.mark.parametrize("fault", ["truncated", "bit_flip", "garbage", "empty"])
def test_a_damaged_cache_file_is_compiled_again(tmp_path, warm, fault):
    """Every cache file damaged: each process still gives the right bits (the checksum
    refuses the file before its object code is loaded, so a bit flip never reaches the
    JIT linker, which aborts the process), and the damaged files are replaced."""
    paths = _fill(tmp_path, warm)
    for path in paths:
        data = bytearray(path.read_bytes())
        if fault == "truncated":
            data = data[: len(data) // 2]
        elif fault == "bit_flip":
            data[len(data) * 2 // 3] ^= 0x10
        elif fault == "garbage":
            data = bytearray(os.urandom(len(data)))
        else:
            data = bytearray()
        path.write_bytes(bytes(data))
    res = _run(tmp_path)
    assert res["ok"] and res["native"] and res["compiled"] == len(paths)
    assert _run(tmp_path)["compiled"] == 0  # (rewritten intact)


def test_swapped_cache_files_are_never_called(tmp_path, warm):
    """Each cache file's content replaced by another kernel's: loading it would call
    another function (or address 0) through the entry; the name recorded in the file
    refuses it instead."""
    paths = _fill(tmp_path, warm)
    assert len(paths) >= 2
    contents = [p.read_bytes() for p in paths]
    for path, data in zip(paths, contents[1:] + contents[:1], strict=True):
        path.write_bytes(data)
    res = _run(tmp_path)
    assert res["ok"] and res["native"] and res["compiled"] == len(paths)


def test_no_writable_cache_location(tmp_path):
    """A read-only install with no writable cache: import and every call work, compiled in
    memory, with one warning that says so; nothing is written."""
    res = _run(tmp_path / "cache", _READ_ONLY)
    # (what it compiles depends on what the package's own __pycache__ already holds: it
    # is read too, as a read-only pre-warmed cache)
    assert res["ok"] and res["native"]
    assert len(res["warnings"]) == 1 and "no writable cache location" in res["warnings"][0]
    assert not (tmp_path / "cache").exists() or not _files(tmp_path / "cache")


def test_a_read_only_prewarmed_cache_is_read(tmp_path, warm):
    _fill(tmp_path, warm)
    res = _run(tmp_path, _READ_ONLY)
    assert res["ok"] and res["native"] and res["compiled"] == 0


def test_a_numba_upgrade_compiles_again(tmp_path, warm):
    """Machine code cached under another Numba version is never loaded (its key holds the
    versions of Numba, llvmlite and Python and the target)."""
    _fill(tmp_path, warm)
    res = _run(tmp_path, "import numba\nnumba.__version__ = '99.0.0'\n")
    assert res["ok"] and res["native"] and res["compiled"] == len(warm)


# Numba's internals as an upgrade might change them: its compiler entry no longer takes the
# code library to lower into (Numba's own calls never pass one).
_OTHER_INTERNALS = """
from numba.core import compiler
plain = compiler.compile_extra
def compile_extra(*args, library=None, **kwargs):
    if library is not None:
        raise TypeError("compile_extra() got an unexpected keyword argument 'library'")
    return plain(*args, **kwargs)
compiler.compile_extra = compile_extra
"""


def test_other_numba_internals_compile_the_adapter_apart(tmp_path):
    """Kernel and adapter are compiled into one library through Numba's private compiler
    API; where it is not what fp8kit reads, each kernel's adapter is compiled apart
    (Numba's public cfunc), with one warning that names the cost: the right bits, a warm
    cache the next time."""
    res = _run(tmp_path, _OTHER_INTERNALS)
    assert res["ok"] and res["native"] and res["compiled"] >= 1
    assert len(res["warnings"]) == 1
    assert "compiles each kernel's adapter apart" in res["warnings"][0]
    again = _run(tmp_path)
    assert again["ok"] and again["native"] and again["compiled"] == 0 and not again["warnings"]


def test_racing_first_compiles(tmp_path):
    """Four processes start on one empty cache at once: each writes its files atomically
    (a temporary file renamed), so every process gives the right bits and a later one
    loads everything."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", _WORK], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]  # fmt: skip
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1])["ok"]
    assert _run(tmp_path)["compiled"] == 0
    assert not [p for p in _files(tmp_path) if p.suffix == ".tmp"]


class _Library:
    def __init__(self, fail):
        self.fail = fail

    def serialize_using_object_code(self):
        if self.fail == "serialize":
            raise OSError(28, "No space left on device")
        return ("x", "object", (b"code", b"bitcode"))


@pytest.mark.parametrize("fail", ["serialize", "replace"])
def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch, fail):
    if fail == "replace":

        def refuse(src, dst):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(native.os, "replace", refuse)
    native._store(str(tmp_path), "fp8kit_probe_0123", _Library(fail), "probe")
    assert list(tmp_path.iterdir()) == []


def test_stale_entries_are_pruned(tmp_path, monkeypatch):
    """Storing a kernel's entry removes entries of the same kernel written for other
    kernel sources and leftover temporary files, once older than PRUNE_AGE (a checkout
    sharing the cache keeps its fresh ones)."""
    old = time.time() - 2 * native.PRUNE_AGE
    stale = [
        tmp_path / "fp8kit_probe_aaaa.000000000001.native",
        tmp_path / "fp8kit_probe_bbbb.000000000002.native",
        tmp_path / ".fp8kit-x.tmp",
    ]
    fresh = tmp_path / "fp8kit_probe_cccc.000000000003.native"
    other = tmp_path / "fp8kit_other_dddd.000000000001.native"
    for path in stale + [fresh, other]:
        path.write_bytes(b"x")
    for path in stale + [other]:
        os.utime(path, (old, old))
    native._store(str(tmp_path), "fp8kit_probe_eeee", _Library(None), "probe")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([fresh.name, other.name, native._file_name("fp8kit_probe_eeee")])


def test_an_intact_file_loads_and_a_foreign_one_is_removed(tmp_path):
    """A cache file written for another function name (a swapped file) is refused and
    removed; the file of the name asked for loads."""
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    path = tmp_path / native._file_name("fp8kit_probe_ffff")
    import pickle

    payload = pickle.dumps(("x", "object", (b"", b"")))
    import hashlib

    path.write_bytes(pickle.dumps({"name": "fp8kit_other_0000", "symbol": "s",
                                   "payload": payload,
                                   "sha256": hashlib.sha256(payload).hexdigest()}))  # fmt: skip
    assert native._load("fp8kit_probe_ffff", [str(tmp_path)], codegen) is None
    assert not path.exists()


# The matrix products' kernels (fp8kit._kernels.mma) run as native code from fp8kit's
# cache, as every kernel does; where the checked entry is not available (another ABI,
# _DISPATCHER here) every kernel runs by its Numba dispatcher, whose entries in Numba's
# own cache fp8kit checks (native.guard_numba_cache).
_DISPATCHER = """
from fp8kit._kernels import codec
codec.numba_route = lambda: False
"""
_MM_WORK = """
import json, warnings
import ml_dtypes, numpy as np
from numba.core import event
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with event.install_recorder("fp8kit:compile") as rec:
        import fp8kit
        from fp8kit._kernels import mma
        hopper = ("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
        a = np.full((2, 256), 1.0, ml_dtypes.float8_e4m3fn)
        b = np.full((256, 3), 2.0**-9, ml_dtypes.float8_e4m3fn)
        a[:, 0] = b[0, :] = 448.0
        got = fp8kit.matmul(a, b, instruction=hopper)
    kernels = (mma.kernel("fast", lanes=np.float32), mma.kernel("normalize"))
    hits = sum(sum(k.stats.cache_hits.values()) for k in kernels)
import sys
print(json.dumps({"got": got.tolist(), "hits": hits, "warnings": [str(w.message) for w in caught],
                  "native": [type(k).__name__ == "NativeCall" for k in kernels],
                  "compiled": len(rec.buffer) // 2,
                  "arraymath": "numba.np.arraymath" in sys.modules}))
"""
_MM_FILES = {
    "native": lambda p: p.suffix == ".native" and ("gemm_fast" in p.name or "normalize" in p.name),
    "dispatcher": lambda p: "mma." in p.name,  # (Numba's index and data files)
}


_REFUSE_WRITES = """
import numba.core.caching as caching
def _refuse(self, filepath):
    raise OSError(30, "Read-only file system")
caching.IndexDataCacheFile._open_for_write = _refuse
"""


# Reads this test's cache alone: with no writable location every existing one is read,
# the package's own __pycache__ too, where other tests' processes leave intact entries.
_ONLY_HERE = """
import os
from fp8kit._kernels import native
_dirs = native._cache_dirs
def _here():
    write, read = _dirs()
    return write, [p for p in read if p.startswith(os.environ["NUMBA_CACHE_DIR"])]
native._cache_dirs = _here
"""


def _mm_run(cache_dir, prelude: str = "") -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    code = textwrap.dedent(prelude) + _MM_WORK
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=["native", "dispatcher"])
def mm_warm(request, tmp_path_factory):
    """A cache filled with the matrix product's two kernels (the fast one, the table of
    (s, e)) by one process, on each route: ``(route, prelude, bits, the kernels' files)``."""
    route = request.param
    prelude = _DISPATCHER if route == "dispatcher" else ""
    folder = tmp_path_factory.mktemp(f"mm_warm_{route}")
    first = _mm_run(folder, prelude)
    assert first["hits"] == 0 and first["warnings"] == []
    assert first["native"] == [route == "native"] * 2
    files = {p.relative_to(folder): p.read_bytes() for p in _files(folder)}
    kernel_files = [p for p in files if _MM_FILES[route](p)]
    assert len(kernel_files) == (2 if route == "native" else 4), kernel_files
    return route, prelude, first["got"], files


@pytest.mark.parametrize("fault", ["bit_flip", "truncated_index", "swapped", "unchecked"])
def test_a_damaged_matmul_cache_entry_is_compiled_again(tmp_path, mm_warm, fault):
    """The matmul kernels' cache entries damaged, on both routes: the kernels compile
    again, the bits are the same, and the entries are rewritten (the next process loads
    both quietly, without Numba's lowering: not numba.np.arraymath and the scipy.linalg
    it imports).

    On the dispatcher route, Numba's own cache checks nothing: a damaged data file made
    every later ``matmul`` raise (LLVM's bitcode parser) until deleted by hand, and
    another function's file under the name could be called.  Its entries now carry a
    checksum of their name and content: a damaged file or index, two functions' files
    swapped, or an entry written without the check is compiled again, with a warning."""
    route, prelude, want, files = mm_warm
    paths = [p for p in _fill(tmp_path, files) if _MM_FILES[route](p)]
    data_files = sorted(p for p in paths if p.suffix in (".native", ".nbc"))
    assert len(data_files) == 2
    if fault == "bit_flip":
        for path in data_files:
            blob = bytearray(path.read_bytes())
            blob[len(blob) // 3] ^= 0x5A
            path.write_bytes(bytes(blob))
    elif fault == "truncated_index":  # (fp8kit's own files: each its own index)
        for path in paths:
            if path.suffix in (".nbi", ".native"):
                path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif fault == "swapped":
        first, second = (p.read_bytes() for p in data_files)
        data_files[0].write_bytes(second)
        data_files[1].write_bytes(first)
    else:  # (the payload alone, as Numba writes it; fp8kit's file without its record)
        import pickle

        for path in data_files:
            path.write_bytes(pickle.loads(path.read_bytes())["payload"])
    res = _mm_run(tmp_path, prelude)
    assert res["got"] == want
    if route == "native":
        assert res["compiled"] == 2 and res["hits"] == 0
    else:
        assert any("compiles a cached kernel again" in w for w in res["warnings"]), res
    again = _mm_run(tmp_path, prelude)
    assert again["got"] == want and again["hits"] == 2 and again["warnings"] == []
    assert again["compiled"] == 0 and not again["arraymath"]


def test_a_damaged_matmul_entry_in_a_read_only_cache(tmp_path, mm_warm):
    """A pre-warmed cache that cannot be written, one of whose entries is damaged: the
    kernel is compiled in memory (the write refused, a warning), the other still loads."""
    route, prelude, want, files = mm_warm
    paths = _fill(tmp_path, files)
    path = sorted(p for p in paths if _MM_FILES[route](p) and p.suffix in (".native", ".nbc"))[0]
    path.write_bytes(path.read_bytes()[:100])
    # (the dispatcher route: Numba's writes refused, as where only its index can be
    # found; with no writable location at all Numba's dispatcher caches nothing)
    read_only = prelude + (_READ_ONLY + _ONLY_HERE if route == "native" else _REFUSE_WRITES)
    for _ in range(2):  # (nothing rewritten: the same in the next process)
        res = _mm_run(tmp_path, read_only)
        assert res["got"] == want and res["hits"] == 1
        assert any("writable" in w or "could not write" in w for w in res["warnings"]), res


_AFTER_LOAD = """
import json
import ml_dtypes, numba, numpy as np
import fp8kit
from fp8kit._kernels import mma
hopper = ("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
a = np.full((2, 256), 1.0, ml_dtypes.float8_e4m3fn)
b = np.full((256, 3), 2.0**-9, ml_dtypes.float8_e4m3fn)
a[:, 0] = b[0, :] = 448.0
got = fp8kit.matmul(a, b, instruction=hopper).tolist()
kernels = (mma.kernel("fast", lanes=np.float32), mma.kernel("normalize"))
hits = sum(sum(k.stats.cache_hits.values()) for k in kernels)

@numba.njit
def user(x):  # (a user's kernel using lowering no cached load set up)
    return np.sum(x) + np.linalg.norm(x)

x = np.linspace(-500, 500, 1001).astype(np.float32)
want = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
print(json.dumps({"got": got, "hits": hits, "user": float(user(np.arange(4.0))),
                  "round_to": bool(np.array_equal(fp8kit.round_to(x, "float8_e4m3fn"), want)),
                  "exact": fp8kit.matmul(a, b, instruction="exact").tolist()}))
"""


def test_compiles_after_a_cached_matmul_load(tmp_path, mm_warm):
    """A cached matmul kernel loads without Numba's refresh of its registries (a load
    lowers nothing); whatever compiles afterwards in the process (a user's ``@njit``
    using ``np.linalg``, fp8kit's own kernels, another matmul model) gets them as usual."""
    route, prelude, want, files = mm_warm
    _fill(tmp_path, files)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    code = textwrap.dedent(prelude) + _AFTER_LOAD
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["got"] == want and out["hits"] == 2 and out["round_to"]
    assert out["user"] == 6.0 + 14**0.5
    assert out["exact"][0][0] == float(np.float32(448.0 * 448.0 + 255 * 2.0**-9))  # (float32 out)
