"""The vector loops prefetch their input ahead on x86 CPUs other than AMD's
(:func:`fp8kit._kernels.bits.prefetches`), for arrays past the caches: the hint must change
no bit, never touch memory it may not read, and be in the code where it is chosen."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import platform

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit._kernels import bits, encode16, native

X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.fixture
def cpu_name(monkeypatch):
    """Set the CPU name Numba compiles for (as NUMBA_CPU_NAME does) for prefetches()."""
    from numba.core import config

    def set_name(name):
        monkeypatch.setattr(config, "CPU_NAME", name)
        bits.prefetches.cache_clear()
        return bits.prefetches()

    yield set_name
    monkeypatch.undo()
    bits.prefetches.cache_clear()


@pytest.mark.parametrize("name", ["znver4", "znver2", "bdver2", "btver2", "amdfam10"])
def test_no_prefetch_on_amd(cpu_name, name):
    assert cpu_name(name) is False


@pytest.mark.parametrize("name", ["sapphirerapids", "icelake-server", "skylake-avx512"])
def test_prefetch_on_intel(cpu_name, name):
    assert cpu_name(name) is X86


def _kernels():
    """The encode loops written in LLVM IR (the lean encode is a Numba loop since issue
    42: LLVM's own vectorized loop, measured as fast at 16M without the hint)."""
    fmt = fp8kit.get_format("float8_e4m3fn")
    kernels = [encode16.f32_byte_kernel(fmt, False)]
    return [k for k in kernels if k is not None]


@pytest.mark.skipif(not X86, reason="prefetches() is an x86 choice")
def test_prefetch_is_in_the_encode_loops():
    """Where prefetches() holds, the encode loops carry prefetcht0 (one a cache line of
    input); elsewhere none."""
    for kernel in _kernels():
        asm = native.assembly(kernel._emit).lower()
        assert ("prefetcht0" in asm) is bits.prefetches(), kernel._key


def _guarded(nbytes: int):
    """A writable buffer of ``nbytes`` (whole pages) followed by a page that cannot be
    read: an array at its end shows any read past the array (a segfault)."""
    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, nbytes + page)
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf)) + nbytes
    if libc.mprotect(ctypes.c_void_p(addr), ctypes.c_size_t(page), 0) != 0:
        pytest.skip("mprotect unavailable")
    return buf


@pytest.mark.skipif(platform.system() != "Linux", reason="mmap/mprotect guard page")
@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e3m4", "bfloat16"])
def test_prefetch_past_the_end_reads_nothing(dtype, fmt):
    """Arrays that end just before an unreadable page encode to the same bits as a copy
    elsewhere: the prefetches reach 2 KiB past the end, and a prefetch never faults."""
    dtype = np.dtype(dtype)
    page = mmap.PAGESIZE
    buf = _guarded(4 * page)
    whole = np.frombuffer(buf, dtype=dtype, count=4 * page // dtype.itemsize)
    rng = np.random.default_rng(7)
    whole[:] = (rng.standard_normal(whole.size) * 4).astype(dtype)
    for n in (whole.size, whole.size - 1, whole.size - 64, 1000):
        x = whole[whole.size - n :]
        np.testing.assert_array_equal(fp8kit.encode(x, fmt), fp8kit.encode(x.copy(), fmt))


@pytest.mark.skipif(platform.system() != "Linux", reason="mmap/mprotect guard page")
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2", "bfloat16", "float4_e2m1fn"])
def test_prefetch_past_the_end_of_codes_reads_nothing(fmt):
    """The same for decodes (one byte or two an element: the prefetches reach further
    past the end in elements)."""
    code_dtype = fp8kit.get_format(fmt).code_dtype
    page = mmap.PAGESIZE
    buf = _guarded(page)
    whole = np.frombuffer(buf, dtype=code_dtype, count=page // np.dtype(code_dtype).itemsize)
    x = np.random.default_rng(8).standard_normal(whole.size).astype(np.float32)
    whole[:] = fp8kit.encode(x, fmt)
    for n in (whole.size, whole.size - 1, 100):
        codes = whole[whole.size - n :]
        want = fp8kit.decode(codes.copy(), fmt)
        np.testing.assert_array_equal(
            fp8kit.decode(codes, fmt).view(np.uint32), want.view(np.uint32)
        )
