"""The chunk argument's NO_STREAM flag (fp8kit._parallel): results fp8kit allocates are not
written with non-temporal stores.  The flag must change no bit of any result, in the
native kernels that read it (their ``total`` 0), the Numba kernels and the generic native
kernels (which mask it off), on one thread and split between threads."""

import numpy as np
import pytest

import fp8kit
from fp8kit import _parallel
from fp8kit._kernels.codec import dummy, encode_kernel
from fp8kit._kernels.inplace import round_kernel
from fp8kit._kernels.lean import lean_kernel
from fp8kit._kernels.tables import decode_table

#: Above every size from which the kernels stream (64 MiB of traffic).
N = (64 << 20) // 5 + 4099


@pytest.fixture(scope="module")
def x():
    rng = np.random.default_rng(12)
    return (rng.standard_normal(N) * np.exp2(rng.integers(-12, 12, N))).astype(np.float32)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_flag_changes_no_bit(x, threads):
    e4, e3 = fp8kit.get_format("float8_e4m3fn"), fp8kit.get_format("float8_e3m4")
    numba_kernel, _ = encode_kernel(e4, x.dtype, True)
    cases = [
        (round_kernel(e4, x.dtype, True), np.float32),  # (native, streams by total)
        (lean_kernel(e3, x.dtype, True), np.uint8),  # (Numba, the native entry)
        (numba_kernel, np.uint8),  # (Numba: chunk_range masks the flag)
    ]
    xb = x.view(np.uint32)
    with fp8kit.num_threads(threads):
        for kernel, out_dtype in cases:
            assert kernel is not None
            got = [np.empty(x.size, out_dtype) for _ in range(2)]
            for out, flags in zip(got, (0, _parallel.NO_STREAM), strict=True):
                # (the table argument of the kernel's own dtype: the entry checks it)
                sig = getattr(kernel, "_sig", None)
                table = dummy(np.dtype(str(sig.args[-2].dtype)) if sig else np.uint8)
                _parallel.launch(kernel, x.size, xb, dummy(np.uint32), table,
                                 out.view(f"u{out.itemsize}"), flags=flags)  # fmt: skip
            np.testing.assert_array_equal(got[0].view(f"u{out.itemsize}"),
                                          got[1].view(f"u{out.itemsize}"))  # fmt: skip


def test_new_results_and_outs_agree(x):
    """round_to, encode and decode into a new array (the flag set) and into an out."""
    out = np.empty_like(x)
    for _ in range(2):  # (the second call takes the fast path)
        new = fp8kit.round_to(x, "float8_e4m3fn")
        fp8kit.round_to(x, "float8_e4m3fn", out=out)
        np.testing.assert_array_equal(new.view(np.uint32), out.view(np.uint32))
        codes = fp8kit.encode(x, "float8_e3m4")
        o8 = np.empty(x.size, np.uint8)
        np.testing.assert_array_equal(codes, fp8kit.encode(x, "float8_e3m4", out=o8))
        table = decode_table(fp8kit.get_format("float8_e3m4"), np.float32)
        np.testing.assert_array_equal(fp8kit.decode(codes, "float8_e3m4").view(np.uint32),
                                      table[codes])  # fmt: skip


@pytest.mark.parametrize("threads", [1, 2])
def test_decodes_streamed_into_an_out_keep_the_bits(x, threads):
    """Decodes of 64 MiB of traffic and more into a caller's out (streamed, from a cache
    line on), aligned or not, and into a new array (not streamed)."""
    codes = fp8kit.encode(x, "float8_e4m3fn")
    bf = x.view(np.uint32)[:] >> np.uint32(16)
    bf = bf.astype(np.uint16)
    cases = [(codes, "float8_e4m3fn"), (bf, "bfloat16")]
    raw = np.empty(x.size + 16, np.float32)
    with fp8kit.num_threads(threads):
        for data, fmt in cases:
            want = decode_table(fp8kit.get_format(fmt), np.float32)[data]
            for skip in (0, 1, 3):
                out = raw[skip : skip + x.size]
                fp8kit.decode(data, fmt, out=out)
                np.testing.assert_array_equal(out.view(np.uint32), want)
            np.testing.assert_array_equal(fp8kit.decode(data, fmt).view(np.uint32), want)
