"""float32 <-> bfloat16 by kernels called with x and out alone on small arrays (the native
kernels' x-and-out entry, fp8kit._kernels.native.xo_call; the Numba XOKernel where the
native entries cannot read arrays): the same bits as the general kernels, and the
small-call fast path, whose size, layout, alignment and overlap checks these calls do
themselves, gives the full path's results and errors in every case that fails a check."""

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit import codec
from fp8kit._kernels import codec as kc
from fp8kit._kernels import lean, native

BF16 = fp8kit.get_format("bfloat16")
F32 = np.dtype(np.float32)
SATURATE = [True, False, "propagate"]


def _both_kernels(x_bits, saturate):
    """The native kernel encode runs (encode_lean's formula) against the general one; with
    saturate="propagate" encode runs the general kernel itself (no lean rule)."""
    lut, table = kc.dummy(np.uint32), kc.dummy(np.uint8)
    got, want = np.empty(x_bits.size, np.uint16), np.empty(x_bits.size, np.uint16)
    fast = lean.lean_kernel(BF16, F32, saturate) or kc.encode_kernel(BF16, F32, saturate)[0]
    fast.serial(x_bits, lut, table, got)
    kernel, _ = kc.encode_kernel(BF16, F32, saturate)
    kernel.serial(x_bits, lut, table, want)
    return got, want


@pytest.mark.parametrize("saturate", SATURATE)
def test_encode_kernel_same_bits_every_high_half(saturate):
    """Every float32 high half (every bfloat16 neighbourhood: zeros, subnormals, the
    overflow threshold, Inf, NaNs) with the low halves around each rounding boundary."""
    hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    lows = [0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x4000, 0xC000]
    x = (hi[:, None] | np.array(lows, np.uint32)[None, :]).ravel()
    got, want = _both_kernels(x, saturate)
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("saturate", SATURATE)
def test_encode_kernel_same_bits_every_float32(saturate):
    for start in range(0, 1 << 32, 1 << 26):
        x = np.arange(start, start + (1 << 26), dtype=np.uint64).astype(np.uint32)
        got, want = _both_kernels(x, saturate)
        np.testing.assert_array_equal(got, want)


def test_encode_and_decode_use_the_x_out_kernels():
    x = np.float32([1.0, 3.0e38, np.inf, -np.nan])
    codes = fp8kit.encode(x, "bfloat16")
    fp8kit.encode(x, "bfloat16", out=np.empty(4, np.uint16))
    fp8kit.decode(codes, "bfloat16", out=np.empty(4, np.float32))
    fp8kit.decode(codes.view(ml_dtypes.bfloat16))
    for plans, key in [
        (codec._FAST_ENCODE, ("bfloat16", F32, True)),
        (codec._FAST_ENCODE, ("bfloat16", F32, True, np.dtype(np.uint16))),
        (codec._FAST_DECODE, ("bfloat16", np.dtype(np.uint16), None, F32)),
        (codec._FAST_DECODE, (None, np.dtype(ml_dtypes.bfloat16), None)),
    ]:
        plan = plans[key]
        # a call of x and out alone: the native kernel's (or, where this interpreter's
        # array layout is another, the Numba XOKernel's: no parameter, lut or table array)
        assert plan[5] is not None
        if native.xo_entry() is not None:
            assert plan[5].func is native.xo_entry()
        else:
            assert plan[1:4] == (None, None, None)


def test_large_encode_to_bfloat16_records_the_native_plan(monkeypatch):
    """Arrays at the threading threshold or above run the native kernel threaded (it
    streams its stores from 64 MiB); the plan a large call records also serves small
    calls (with x and out alone), and both give the same bits."""
    monkeypatch.setattr(codec, "_FAST_ENCODE", {})
    x = _data(codec._SMALL)
    big = fp8kit.encode(x, "bfloat16")
    plan = codec._FAST_ENCODE[("bfloat16", F32, True)]
    assert plan[2] is not None and plan[5] is not None
    small = fp8kit.encode(x[:1000], "bfloat16")
    assert codec._FAST_ENCODE[("bfloat16", F32, True)] is plan
    np.testing.assert_array_equal(big[:1000].view(np.uint16), small.view(np.uint16))


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-133, 120, n))).astype(np.float32)
    x[:5] = [np.nan, np.inf, -0.0, 3.4e38, -np.inf]
    return x


def _same(want, got):
    assert type(got) is type(want) and got.dtype == want.dtype and got.shape == want.shape
    got, want = np.asarray(got), np.asarray(want)
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def _full(call):
    saved = codec._SMALL  # 0: every array is "large", the full path runs
    codec._SMALL = 0
    try:
        return call()
    finally:
        codec._SMALL = saved


ENC = lambda x, out=None: fp8kit.encode(x, "bfloat16", out=out)  # noqa: E731
DEC = lambda c, out=None: fp8kit.decode(c, "bfloat16", out=out)  # noqa: E731
DEC_TYPED = lambda c, out=None: fp8kit.decode(c.view(ml_dtypes.bfloat16), out=out)  # noqa: E731


def _cases():
    """(name, call, input, out): inputs and outputs that fail one check each."""
    x = _data(1000)
    c = x.astype(ml_dtypes.bfloat16).view(np.uint16)  # (no kernel compiled at collection)
    for name, call, src, odt in [
        ("encode", ENC, x, np.uint16),
        ("decode", DEC, c, np.float32),
        ("decode typed", DEC_TYPED, c, np.float32),
    ]:
        isz = src.itemsize
        yield name + " plain", call, src, None
        yield name + " out", call, src, np.zeros(src.size, odt)
        yield name + " size 0", call, src[:0], None
        yield name + " size 0 out", call, src[:0], np.zeros(0, odt)
        yield name + " size 1 out", call, src[:1], np.zeros(1, odt)
        yield name + " 2-D", call, src.reshape(20, 50), None
        yield name + " 2-D out", call, src.reshape(20, 50), np.zeros((20, 50), odt)
        yield name + " strided x", call, src[::3], None
        yield name + " strided x out", call, src[::3], np.zeros(src[::3].size, odt)
        yield name + " negative stride x", call, src[::-1], None
        yield name + " strided out", call, src[:500], np.zeros(1000, odt)[::2]
        yield name + " broadcast to out", call, src[:50], np.zeros((3, 50), odt)
        yield name + " 0-d", call, src.reshape(-1)[7:8].reshape(()), None
        ro = src.copy()
        ro.flags.writeable = False
        yield name + " read-only x", call, ro, np.zeros(src.size, odt)
        buf = np.zeros(src.nbytes + 1, np.uint8)[1:].view(src.dtype)
        buf[:] = src
        yield name + " unaligned x", call, buf, None
        obuf = np.zeros(src.size * np.dtype(odt).itemsize + 1, np.uint8)[1:].view(odt)
        yield name + " unaligned out", call, src, obuf
        big = np.resize(src, (1 << 17) + 3)
        yield name + " threshold size", call, big, np.zeros(big.size, odt)
        yield name + " below threshold", call, big[: (1 << 17) - 1], None
        # out over x's memory: partly (the full path copies x first)
        raw = np.zeros(src.size * max(isz, np.dtype(odt).itemsize) * 2, np.uint8)
        xs = raw[: src.nbytes].view(src.dtype)
        xs[:] = src
        yield (
            name + " overlap",
            call,
            xs,
            raw[isz : isz + src.size * np.dtype(odt).itemsize].view(odt),
        )


@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: c[0])
def test_fast_path_gives_the_full_paths_results(case):
    _, call, src, out = case
    x0 = src.copy()
    overlap = out is not None and np.may_share_memory(src, out)
    want = _full(lambda: call(x0, None if out is None else np.zeros_like(out)))
    for _ in range(3):  # the first call records the plan, the others may run it
        if overlap:
            src[...] = x0  # (the previous call wrote over x)
        got = call(src, out)
        if out is not None:
            assert got is out
        _same(want, got)


def test_wrong_out_still_raises_after_a_plan():
    x = _data(40)
    c = fp8kit.encode(x, "bfloat16")
    for _ in range(2):
        ENC(x, np.empty(40, np.uint16))
        DEC(c, np.empty(40, np.float32))
    with pytest.raises(TypeError, match="encode: out has dtype uint8"):
        ENC(x, np.empty(40, np.uint8))
    with pytest.raises(ValueError, match=r"encode: out has shape \(41,\)"):
        ENC(x, np.empty(41, np.uint16))
    with pytest.raises(ValueError, match=r"decode: out has shape \(39,\)"):
        DEC(c, np.empty(39, np.float32))
    with pytest.raises(TypeError, match="decode: dtype must be .* got >f4"):
        DEC(c, np.empty(40, ">f4"))
    for call, src, dt in ((ENC, x, np.uint16), (DEC, c, np.float32)):
        ro = np.empty(40, dt)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="out is read-only"):
            call(src, ro)
        with pytest.raises(TypeError, match="out must be a numpy array"):
            call(src, [0] * 40)
        got = call(src, np.ma.masked_array(np.zeros(40, dt)))  # a subclass: the full path
        want = _full(lambda c=call, s=src, d=dt: c(s, np.ma.masked_array(np.zeros(40, d))))
        assert type(got) is type(want) is np.ma.MaskedArray
        np.testing.assert_array_equal(got.data.view(f"u{got.itemsize}"),
                                      want.data.view(f"u{want.itemsize}"))  # fmt: skip


def test_refused_call_writes_nothing():
    """The kernel's own checks come before any write: a refused call leaves out as it was."""
    x = _data(100)
    for _ in range(2):
        ENC(x, np.empty(100, np.uint16))
    ep = codec._FAST_ENCODE[("bfloat16", F32, True, np.dtype(np.uint16))][5]
    limit = ~codec._SMALL
    out = np.full(100, 7, np.uint16)
    assert ep(x, out, limit) == 0 and not (out == 7).all()
    out[:] = 7
    for xx, oo in [
        (x, out[:99]),  # sizes differ
        (x[::2], out[:50]),  # strided
        (x[:50], out[::2]),
        (x[:10], x[1:6].view(np.uint16)),  # overlap
    ]:
        assert ep(xx, oo, limit) == 1
        assert ep(xx, oo, ~0) == 1  # a limit of 0 refuses every size
    assert (out == 7).all()
    assert ep(x, out, ~100) == 1 and ep(x, out, ~101) == 0


@pytest.mark.parametrize("saturate", [True, False])
def test_astype_and_cast_to_bfloat16(saturate):
    x = _data(300)
    want = _full(lambda: fp8kit.astype(x, "bfloat16", saturate=saturate))
    for _ in range(3):
        _same(want, fp8kit.astype(x, "bfloat16", saturate=saturate))
        _same(want, fp8kit.astype(x[::-1], "bfloat16", saturate=saturate)[::-1])
    want = _full(lambda: fp8kit.cast(x, "BFLOAT16", saturate=saturate))
    for _ in range(3):
        _same(want, fp8kit.cast(x, "BFLOAT16", saturate=saturate))
