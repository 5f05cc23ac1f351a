"""The fast paths of encode, decode and round_to (fp8kit/codec.py): a call on a
C-contiguous numpy array reuses the kernel and constants that an earlier fully checked call
with the same (fmt, dtype, option) key recorded (threaded from the threading threshold up).
They must give the full path's bits and never skip a check that depends on the data or on an
argument."""

import contextlib
import sys

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit import codec
from fp8kit._kernels import codec as kernels_codec

FORMATS = ["float8_e4m3fn", "float8_e5m2fnuz", "bfloat16", "float6_e3m2fn", "float4_e2m1fn"]


def data(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-12, 12, shape))).astype(dtype)
    x.flat[:4] = [np.nan, np.inf, -0.0, 1e30]
    return x


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(1000,), (7, 33), (2, 3, 5)])
def test_fast_paths_give_the_full_paths_bits(fmt, shape):
    x = data(shape)
    for _ in range(2):  # the first call records the plan, the second runs it
        codes = fp8kit.encode(x, fmt)
        full = np.empty(shape, codes.dtype)
        fp8kit.encode(x, fmt, out=full)  # (out= has a fast path too: see the tests below)
        np.testing.assert_array_equal(codes, full)
        assert codes.shape == shape and codes.flags.c_contiguous
        r = fp8kit.round_to(x, fmt)
        np.testing.assert_array_equal(r.view(np.uint32), fp8kit.round_to(x.copy(order="F"),
                                      fmt).view(np.uint32))  # fmt: skip
        d = fp8kit.decode(codes, fmt)
        np.testing.assert_array_equal(d.view(np.uint32), fp8kit.decode(codes, fmt,
                                      out=np.empty(shape, np.float32)).view(np.uint32))  # fmt: skip
        typed = fp8kit.astype(x, fmt)
        np.testing.assert_array_equal(fp8kit.decode(typed).view(np.uint32), d.view(np.uint32))
    assert (fmt, x.dtype, True) in codec._FAST_ENCODE
    assert (fmt, x.dtype, True) in codec._FAST_ROUND


def test_saturate_and_dtype_are_part_of_the_key():
    x = np.float32([1e6, -1e6, np.inf] * 10)
    for _ in range(2):
        assert fp8kit.encode(x, "float8_e4m3fn")[:3].tolist() == [0x7E, 0xFE, 0x7E]
        assert fp8kit.encode(x, "float8_e4m3fn", saturate=False)[:3].tolist() == [0x7F, 0xFF, 0x7F]
        assert fp8kit.decode(np.uint8([0x38] * 4), "float8_e4m3fn", dtype=np.float64).dtype == (
            np.float64
        )
        assert fp8kit.decode(np.uint8([0x38] * 4), "float8_e4m3fn").dtype == np.float32


def test_checks_that_depend_on_data_or_arguments_still_run():
    codes = np.uint8([0, 1, 15])
    for _ in range(2):
        fp8kit.decode(codes, "float4_e2m1fn")  # uint8 holding 4-bit codes: range-checked
    with pytest.raises(ValueError, match=r"codes\[1\] = 16 is not a code of float4_e2m1fn"):
        fp8kit.decode(np.uint8([0, 16, 1]), "float4_e2m1fn")
    x = np.float32([1.0, 2.0])
    fp8kit.encode(x, "float8_e4m3fn")
    with pytest.raises(TypeError, match="saturate must be True or False"):
        fp8kit.encode(x, "float8_e4m3fn", saturate="yes")
    with pytest.raises(ValueError, match="random_bits"):
        fp8kit.encode(x, "float8_e4m3fn", random_bits=40)
    with pytest.raises(ValueError, match="seed is only used"):
        fp8kit.encode(x, "float8_e4m3fn", seed=1)
    with pytest.raises(ValueError, match="unknown fmt"):
        fp8kit.encode(x, "float8_e9m9")
    with pytest.raises(TypeError):
        fp8kit.encode(np.int32([1, 2]), "float8_e4m3fn")
    # a masked array (an ndarray subclass) keeps its mask, not the fast path's plain result
    m = np.ma.masked_array(x, mask=[False, True])
    assert isinstance(fp8kit.encode(m, "float8_e4m3fn"), np.ma.MaskedArray)
    # a 0-d array still gives a scalar
    assert np.ndim(fp8kit.encode(np.float32(1.0), "float8_e4m3fn")) == 0


def test_byte_swapped_and_strided_inputs_take_the_full_path():
    x = data((600,))
    want = fp8kit.encode(x, "float8_e5m2")
    np.testing.assert_array_equal(fp8kit.encode(x.astype(">f4"), "float8_e5m2"), want)
    np.testing.assert_array_equal(fp8kit.encode(x.astype(">f4"), "float8_e5m2"), want)
    np.testing.assert_array_equal(fp8kit.encode(x[::2], "float8_e5m2"), want[::2])
    bf = x.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(
        fp8kit.encode(bf, "float8_e5m2"), fp8kit.encode(bf.astype(np.float32), "float8_e5m2")
    )


# ---------------------------------------------------------------- issue 16: entry points,
# out=, astype and cast.  The full path is forced by a threshold of 0 (every array is
# "large" then); the fast path by a second call with the same key.


@contextlib.contextmanager
def full_path():
    """Every call takes the full path: no plan runs (the kernels of x and out alone take
    arrays below codec._SMALL only; cast's fast path runs through codec._run_plan too)."""
    cast_module = sys.modules["fp8kit.cast"]  # (fp8kit.cast is the function)
    saved = codec._SMALL, codec._run_plan, cast_module._run_plan
    codec._SMALL = 0
    codec._run_plan = cast_module._run_plan = lambda plan, x, out: None
    try:
        yield
    finally:
        codec._SMALL, codec._run_plan, cast_module._run_plan = saved


def both(call):
    """(full path's result, fast path's result) of ``call()``: bits, dtype and shape."""
    with full_path():
        want = call()
    call()  # records the plan (if the full path above did not)
    got = call()
    return np.asarray(want), np.asarray(got)


def same(want, got):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(bits_of(got), bits_of(want))


def bits_of(a):
    return a.view(f"u{a.dtype.itemsize}")


def float32_specials():
    """float32 boundary values: zeros, subnormals, the edges of every format's range and the
    rounding boundaries around them, Inf and NaNs with payloads, both signs."""
    v = [0, 1, 2, 0x7FFFFF, 0x800000, 0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00000,
         0x7FC00001, 0x7FFFFFFF, 0x7FA00000, 0x3F800000, 0x3F800001]  # fmt: skip
    for e in range(0, 255):
        for m in (0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x10000, 0x17FFF, 0x18000, 0x3FFFFF,
                  0x400000, 0x7FFFFF, 0x80000, 0x100000, 0x200000, 0x0FFFFF, 0x1FFFFF):  # fmt: skip
            v.append((e << 23) | m)
    u = np.array(v, np.uint32)
    return np.concatenate([u, u | np.uint32(0x80000000)]).view(np.float32)


with np.errstate(invalid="ignore", over="ignore"):
    _F64 = float32_specials().astype(np.float64)
INPUTS = {
    "float32": float32_specials(),
    # every bfloat16 and float16 code
    "bfloat16": np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16),
    "float16": np.arange(1 << 16, dtype=np.uint16).view(np.float16),
    "float64": np.concatenate([_F64, data((999,), np.float64)]),
}
ALL_FORMATS = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
               "float8_e8m0fnu", "float6_e2m3fn", "float4_e2m1fn", "bfloat16", "float16",
               "float8_e4m3b11fnuz"]  # fmt: skip


@pytest.mark.parametrize("fmt", ALL_FORMATS)
@pytest.mark.parametrize("src", list(INPUTS))
@pytest.mark.parametrize("saturate", [True, False])
def test_fast_paths_exhaustive_bits_with_and_without_out(fmt, src, saturate):
    x = INPUTS[src]
    f = fp8kit.get_format(fmt)
    same(*both(lambda: fp8kit.encode(x, fmt, saturate=saturate)))
    out = np.empty(x.shape, f.code_dtype)
    same(*both(lambda: fp8kit.encode(x, fmt, saturate=saturate, out=out).copy()))
    same(*both(lambda: fp8kit.round_to(x, fmt, saturate=saturate)))
    r = np.empty_like(x)
    same(*both(lambda: fp8kit.round_to(x, fmt, saturate=saturate, out=r).copy()))
    if f.dtype is not None:
        want, got = both(lambda: fp8kit.astype(x, fmt, saturate=saturate))
        same(want, got)
        assert got.dtype == f.dtype
        assert fp8kit.astype(x, fmt, saturate=saturate).base is not None  # a view, as before
        typed = np.empty(x.shape, f.dtype)
        same(*both(lambda: fp8kit.encode(x, fmt, saturate=saturate, out=typed).copy()))


@pytest.mark.parametrize("fmt", ALL_FORMATS)
@pytest.mark.parametrize("dtype", [None, np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_decode_fast_path_every_code(fmt, dtype):
    f = fp8kit.get_format(fmt)
    codes = np.arange(1 << f.bits, dtype=f.code_dtype)
    same(*both(lambda: fp8kit.decode(codes, fmt, dtype=dtype)))
    out = np.empty(codes.shape, dtype or np.float32)
    same(*both(lambda: fp8kit.decode(codes, fmt, dtype=dtype, out=out).copy()))
    if f.dtype is not None:
        typed = codes.view(f.dtype)
        same(*both(lambda: fp8kit.decode(typed, dtype=dtype)))
        same(*both(lambda: fp8kit.decode(typed, fmt, dtype=dtype, out=out).copy()))
    # (and the plans recorded went to the compiled entry point, not the dispatcher; sub-byte
    # codes in uint8 are range-checked: no plan)
    key = (fmt, codes.dtype, dtype)
    assert (key in codec._FAST_DECODE) == (f.bits in (8, 16))
    if f.bits in (8, 16):
        assert type(codec._FAST_DECODE[key][0]).__name__ == "builtin_function_or_method"


@pytest.mark.parametrize("shape", [(1,), (0,), (3, 5), (2, 3, 4), (1000,)])
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "bfloat16", "float4_e2m1fn"])
def test_fast_out_any_shape(shape, fmt):
    x = data(shape) if np.prod(shape) >= 4 else np.ones(shape, np.float32)
    f = fp8kit.get_format(fmt)
    out = np.empty(shape, f.code_dtype)
    want, got = both(lambda: fp8kit.encode(x, fmt, out=out).copy())
    same(want, got)
    assert fp8kit.encode(x, fmt, out=out) is out
    d = np.empty(shape, np.float32)
    assert fp8kit.decode(out, fmt, out=d) is d
    same(*both(lambda: fp8kit.decode(out, fmt, out=d).copy()))
    r = np.empty(shape, np.float32)
    assert fp8kit.round_to(x, fmt, out=r) is r
    same(r, fp8kit.round_to(x.copy(order="F"), fmt))


FUNCS = {
    "encode": lambda x, out: fp8kit.encode(x, "float8_e4m3fn", out=out),
    "round_to": lambda x, out: fp8kit.round_to(x, "float8_e4m3fn", out=out),
}


@pytest.mark.parametrize("func", list(FUNCS))
def test_wrong_out_still_raises_after_a_plan(func):
    x = data((40,))
    call = FUNCS[func]
    good = np.empty(40, np.uint8 if func == "encode" else np.float32)
    for _ in range(2):  # the plan for out's dtype exists after the first call
        call(x, good)
    with pytest.raises(TypeError, match=f"{func}: out has dtype int8"):
        call(x, np.empty(40, np.int8))
    with pytest.raises(ValueError, match=rf"{func}: out has shape \(41,\)"):
        call(x, np.empty(41, good.dtype))
    ro = np.empty(40, good.dtype)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=f"{func}: out is read-only"):
        call(x, ro)
    with pytest.raises(TypeError, match=f"{func}: out must be a numpy array"):
        call(x, [0] * 40)
    # an ndarray subclass as out: the full path (which writes into it)
    got = call(x, np.ma.masked_array(np.empty(40, good.dtype)))
    with full_path():
        want = call(x, np.ma.masked_array(np.empty(40, good.dtype)))
    assert type(got) is type(want)
    same(np.asarray(want), np.asarray(got))


def test_wrong_decode_out_still_raises_after_a_plan():
    codes = np.arange(40, dtype=np.uint8)
    for _ in range(2):
        fp8kit.decode(codes, "float8_e4m3fn", out=np.empty(40, np.float32))
    with pytest.raises(TypeError, match="decode: dtype must be float16, .* got uint8"):
        fp8kit.decode(codes, "float8_e4m3fn", out=np.empty(40, np.uint8))
    with pytest.raises(TypeError, match="out has dtype float32; allowed: float64"):
        fp8kit.decode(codes, "float8_e4m3fn", dtype=np.float64, out=np.empty(40, np.float32))
    with pytest.raises(ValueError, match=r"decode: out has shape \(39,\)"):
        fp8kit.decode(codes, "float8_e4m3fn", out=np.empty(39, np.float32))
    ro = np.empty(40, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="decode: out is read-only"):
        fp8kit.decode(codes, "float8_e4m3fn", out=ro)
    with pytest.raises(ValueError, match="is not a code of float4_e2m1fn"):
        for _ in range(2):
            fp8kit.decode(np.uint8([1, 2, 16]), "float4_e2m1fn", out=np.empty(3, np.float32))


@pytest.mark.parametrize("func", list(FUNCS))
def test_out_that_is_strided_broadcast_or_overlapping(func):
    x = data((400,))
    call = FUNCS[func]
    odt = np.uint8 if func == "encode" else np.float32
    want = call(x, np.empty(400, odt)).copy()
    call(x, np.empty(400, odt))  # a plan for out's dtype
    strided = np.zeros(800, odt)[::2]  # not contiguous: the full path
    same(want, call(x, strided).copy())
    wide = np.zeros((3, 400), odt)  # broadcast: the full path
    same(np.broadcast_to(want, (3, 400)), call(x, wide))
    # out over x's own memory, partly: the full path copies x first
    buf = data((401,))
    xs = buf[1:]
    expect = call(xs.copy(), np.empty(400, odt)).copy()
    overlap = buf.view(odt)[:400] if func == "encode" else buf[:400]
    same(expect, call(xs, overlap).copy())
    if func == "round_to":  # exactly in place
        y = x.copy()
        same(want, call(y, y))


def test_overlapping_decode_out():
    raw = np.zeros(4 * 100, np.uint8)
    codes = raw[:100]
    codes[:] = np.arange(100)
    want = fp8kit.decode(codes.copy(), "float8_e5m2")
    fp8kit.decode(codes.copy(), "float8_e5m2", out=np.empty(100, np.float32))  # a plan
    out = raw.view(np.float32)  # shares its first 100 bytes with the codes
    same(want, fp8kit.decode(codes, "float8_e5m2", out=out).copy())


def test_non_contiguous_unaligned_and_readonly_inputs():
    x = data((1000,))
    want = fp8kit.encode(x, "float8_e4m3fn")
    fp8kit.encode(x, "float8_e4m3fn")  # a plan
    same(want[::3], fp8kit.encode(x[::3], "float8_e4m3fn"))
    same(want.reshape(10, 100).T, fp8kit.encode(x.reshape(10, 100).T, "float8_e4m3fn"))
    buf = np.zeros(4001, np.uint8)
    unaligned = buf[1:].view(np.float32)
    unaligned[:] = x
    assert not unaligned.flags.aligned
    same(want, fp8kit.encode(unaligned, "float8_e4m3fn"))
    out = np.empty(4001, np.uint8)[1:].view(np.float32)
    with full_path():
        r = fp8kit.round_to(x, "float8_e4m3fn")
    same(r, fp8kit.round_to(x, "float8_e4m3fn", out=out).copy())
    ro = x.copy()
    ro.flags.writeable = False
    same(want, fp8kit.encode(ro, "float8_e4m3fn"))


def test_default_options_by_identity_only():
    x = data((50,))
    want = fp8kit.encode(x, "float8_e4m3fn")
    fp8kit.encode(x, "float8_e4m3fn")
    # equal but not identical values take the full path, which accepts or refuses them
    same(want, fp8kit.encode(x, "float8_e4m3fn", rounding="".join(["nearest", "_even"])))
    same(want, fp8kit.encode(x, "float8_e4m3fn", random_bits=np.int64(16)))
    same(want, fp8kit.encode(x, "float8_e4m3fn", saturate=np.True_))
    with pytest.raises(TypeError, match="saturate must be True or False"):
        fp8kit.encode(x, "float8_e4m3fn", saturate=1.0)
    with pytest.raises(ValueError, match="random_bits"):
        fp8kit.encode(x, "float8_e4m3fn", random_bits=16.0)
    with pytest.raises(TypeError, match="flush_subnormals must be True or False"):
        fp8kit.encode(x, "float8_e4m3fn", flush_subnormals=0)


def test_native_entry_of_numba_kernels_refuses_what_does_not_fit():
    """A Numba-written kernel run as native code (fp8kit._kernels.native.NumbaKernel)
    checks every argument against its signature in its entry: item size, one dimension,
    C-contiguous and aligned, writeable output, x and out of one size, an int where it
    takes one, the arity; a mismatch raises TypeError naming the argument, and nothing is
    written."""
    from fp8kit._kernels.native import NativeCall, numba_route

    if not numba_route():
        pytest.skip("this interpreter's array layout is not the one the entry reads")
    x = data((10,))
    kernel, _ = codec.encode_kernel(
        fp8kit.get_format("float8_e4m3fn"), x.dtype, True, strategy="generic"
    )
    fn = kernel.build()
    assert type(fn) is NativeCall
    xb, lut, table = x.view(np.uint32), codec._lut_for(0), codec.dummy(np.uint8)
    out = np.zeros(10, np.uint8)
    fn(xb, lut, table, out, 1)
    assert np.array_equal(out, fp8kit.encode(x, "float8_e4m3fn"))
    fn(x, lut, table, out, 1)  # (float32 data as its bits: the item size is the check)
    bad = {
        1: [(xb.astype(np.uint64), lut, table, out, 1), (xb[::2], lut, table, out[:5], 1),
            (xb.reshape(2, 5), lut, table, out, 1)],
        4: [(xb, lut, table, out[:9], 1), (xb, lut, table, out.astype(np.uint16), 1),
            (xb, lut, table)],  # (the arity: the count of arguments given)
        5: [(xb, lut, table, out, out)],
        2: [(xb, 7, table, out, 1)],
    }  # fmt: skip
    readonly = out.copy()
    readonly.flags.writeable = False
    bad[4].append((xb, lut, table, readonly, 1))
    for index, calls in bad.items():
        for args in calls:
            out[:] = 0
            with pytest.raises(TypeError, match=f"argument {index} is not what"):
                fn(*args)
            assert not out.any()


def test_entry_point_refuses_what_does_not_fit(fresh_kernels):
    # Numba dispatchers, built here: a kernel another test built earlier in this worker may
    # be native code, whose checked entry tells types apart by item size only
    fresh_kernels(kernels_codec, "numba_route", lambda: False)
    x = data((10,))
    fp8kit.encode(x, "float8_e4m3fn")
    kernel, _ = codec.encode_kernel(fp8kit.get_format("float8_e4m3fn"), x.dtype, True)
    fn = kernel.build()
    xb, lut, table = x.view(np.uint32), codec._lut_for(0), codec.dummy(np.uint8)
    ok = (xb, lut, table, np.empty(1, np.uint8))
    assert codec._entry_point(fn, ok) is not None
    assert codec._entry_point(fn, (x,) + ok[1:]) is None  # float32 is not the kernel's uint32
    assert codec._entry_point(fn, (xb.astype(np.uint64),) + ok[1:]) is None
    assert codec._entry_point(fn, ok[:-1]) is None  # arity
    assert codec._entry_point(lambda *a: None, ok) is None  # not a dispatcher


CASTS = ["FLOAT8E4M3FN", "FLOAT8E5M2", "FLOAT8E4M3FNUZ", "FLOAT8E5M2FNUZ", "BFLOAT16",
         "FLOAT16", "FLOAT4E2M1", "FLOAT6E3M2", "float8_e4m3", "FLOAT8E8M0", "FLOAT",
         "INT8", np.float16, ml_dtypes.float8_e4m3fn, "p3109_k8p4se"]  # fmt: skip


@pytest.mark.parametrize("to", CASTS)
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("rules", ["conformance", "fnuz-inf-nan", "float4-nan-six"])
def test_cast_fast_path_bits(to, saturate, rules):
    x = np.concatenate([float32_specials(), data((500,))])
    same(*both(lambda: fp8kit.cast(x, to, saturate=saturate, rules=rules)))
    plans = sys.modules["fp8kit.cast"]._FAST_CAST
    if to in ("FLOAT8E4M3FN", "BFLOAT16", np.float16) or (to == "FLOAT8E5M2FNUZ" and not saturate):
        assert (to, x.dtype, saturate, rules) in plans
    if to in ("FLOAT8E5M2FNUZ", "FLOAT8E4M3FNUZ") and saturate and rules == "conformance":
        assert (to, x.dtype, saturate, rules) not in plans  # +-Inf fixed where the data has it
    if to == "FLOAT4E2M1" and rules == "float4-nan-six":
        assert (to, x.dtype, saturate, rules) not in plans
    # other sources, options and shapes: the full path
    with np.errstate(invalid="ignore", over="ignore"):
        x16 = x.astype(np.float16)
    same(*both(lambda: fp8kit.cast(x16, to, saturate=saturate, rules=rules)))
    same(*both(lambda: fp8kit.cast(x.reshape(-1, 2)[:, 0], to, saturate=saturate, rules=rules)))


def test_cast_fast_path_keeps_its_errors():
    x = data((30,))
    for _ in range(2):
        fp8kit.cast(x, "FLOAT8E4M3FN")
    with pytest.raises(ValueError, match="rules"):
        fp8kit.cast(x, "FLOAT8E4M3FN", rules="no-such-rule")
    with pytest.raises(TypeError, match="saturate must be True or False"):
        fp8kit.cast(x, "FLOAT8E4M3FN", saturate="yes")
    with pytest.raises(ValueError, match="rounding must be one of"):
        fp8kit.cast(x, "FLOAT8E4M3FN", rounding="sideways")
    assert np.ndim(fp8kit.cast(np.float32(1.0), "FLOAT8E4M3FN")) == 0
    m = np.ma.masked_array(x, mask=[True] + [False] * 29)
    assert isinstance(fp8kit.cast(m, "FLOAT8E4M3FN"), np.ma.MaskedArray)


def test_the_fast_paths_are_taken(monkeypatch):
    """After one checked call, these calls never reach the dispatch of the full path."""
    x = data((1000,))
    xb = x.astype(ml_dtypes.bfloat16)
    c8, c16 = fp8kit.encode(x, "float8_e4m3fn"), fp8kit.encode(x, "bfloat16")
    out8, out16, out32 = np.empty(1000, np.uint8), np.empty(1000, np.uint16), np.empty_like(x)
    calls = [
        lambda: fp8kit.encode(x, "float8_e4m3fn"),
        lambda: fp8kit.encode(x, "float8_e4m3fn", out=out8),
        lambda: fp8kit.encode(x.reshape(10, 100), "float8_e4m3fn"),
        lambda: fp8kit.encode(xb, "float8_e5m2", saturate=False),
        lambda: fp8kit.encode(x, "bfloat16", out=out16),
        lambda: fp8kit.decode(c8, "float8_e4m3fn"),
        lambda: fp8kit.decode(c8, "float8_e4m3fn", out=out32),
        lambda: fp8kit.decode(c8.view(ml_dtypes.float8_e4m3fn)),
        lambda: fp8kit.decode(c16, "bfloat16", out=out32),
        lambda: fp8kit.round_to(x, "float8_e4m3fn"),
        lambda: fp8kit.round_to(x, "bfloat16", out=out32),
        lambda: fp8kit.astype(x, "float8_e4m3fn"),
        lambda: fp8kit.astype(x, "bfloat16"),
        lambda: fp8kit.cast(x, "FLOAT8E4M3FN"),
        lambda: fp8kit.cast(x, "BFLOAT16"),
    ]
    for call in calls:
        call()

    def refuse(*args):
        raise AssertionError("the full path ran")

    monkeypatch.setattr(fp8kit._backends, "kind_of", refuse)
    for call in calls:
        call()


def test_a_0d_array_may_be_the_first_call_of_a_process():
    """The first call of a (format, dtype) key records its fast path from one element of x;
    a 0-d x (a numpy scalar array) raised IndexError there, on every kernel kind: the
    x-and-out kernels of bfloat16 <-> float32 and the others.  Each call runs first in a
    fresh process and is checked against ml_dtypes."""
    import subprocess

    code = """
import ml_dtypes, numpy as np, fp8kit
bf, e4 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn
calls = [
    (lambda: fp8kit.decode(np.array(1.5, bf)), np.float32(1.5)),
    (lambda: fp8kit.encode(np.array(1.5, np.float32), "bfloat16"),
     np.array(1.5, bf).view(np.uint16)),
    (lambda: fp8kit.encode(np.array(0.3, np.float32), "float8_e4m3fn"),
     np.array(0.3, np.float32).astype(e4).view(np.uint8)),
    (lambda: fp8kit.decode(np.array(57, np.uint8), "float8_e4m3fn"), np.float32(1.125)),
    (lambda: fp8kit.round_to(np.array(1.3, np.float32), "float8_e4m3fn"), np.float32(1.25)),
]
for call, want in calls:
    for _ in range(2):  # (the first records the fast path, the second runs it)
        got = call()
        assert got.dtype == want.dtype and got.ndim == 0 and got == want, (got, want)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("threads", [1, 2])
def test_large_arrays_take_the_plan_threaded(threads, monkeypatch):
    """From the threading threshold up the plan runs too, threaded (after a call that
    streamed more than the caches hold, the full path's Python costs ~0.1 ms, from memory):
    the full path's bits for encode, decode, round_to, astype and cast, 1-D and 2-D, with
    and without out (float32 -> bfloat16 too: its native kernel's plan, not the small
    calls' call of x and out alone)."""
    from fp8kit._parallel import PARALLEL_THRESHOLD

    n = 2 * PARALLEL_THRESHOLD + 7
    x = data((n,))
    calls = []
    real = codec._launch_compiled
    monkeypatch.setattr(
        codec,
        "_launch_compiled",
        lambda *a, **k: calls.append(a[1]) or real(*a, **k),
        raising=True,
    )

    def check(fmt):
        codes = fp8kit.encode(x, fmt)
        calls.clear()
        same(*both(lambda: fp8kit.encode(x, fmt)))
        assert calls == [n, n], fmt  # (both's second and third calls ran the plan)
        x2 = x[: n - 7].reshape(2, -1)
        same(*both(lambda: fp8kit.encode(x2, fmt, out=np.empty(x2.shape, codes.dtype))))
        same(*both(lambda: fp8kit.round_to(x, fmt)))
        if fmt != "float4_e2m1fn":  # (sub-byte codes in uint8 are range-checked: no plan)
            same(*both(lambda: fp8kit.decode(codes, fmt)))
            same(*both(lambda: fp8kit.decode(codes, fmt, dtype=np.float64)))
        same(*both(lambda: fp8kit.astype(x, fmt)))

    with fp8kit.num_threads(threads):
        for fmt in ("float8_e4m3fn", "float16", "float4_e2m1fn", "bfloat16"):
            check(fmt)
        same(*both(lambda: fp8kit.cast(x, "float8_e5m2")))
        # overlapping out: the full path (it copies first)
        buf = data((n + 1,))
        xs = buf[1:]
        want = fp8kit.round_to(xs.copy(), "float8_e4m3fn")
        same(want, fp8kit.round_to(xs, "float8_e4m3fn", out=buf[:n]).copy())


def test_native_call_of_x_and_out_alone_refuses_what_it_cannot_check():
    """Native kernels that read no table take small 1-D calls with x and out alone
    (fp8kit._kernels.native.xo_call: the checks of layout, size and overlap in the entry):
    it runs them and returns 0, or returns 1 having written nothing for anything else
    (another type, 2-D, sizes that differ or reach the limit, not contiguous, unaligned,
    read-only or overlapping out, a spec that is no int); the calls that take it give the
    full path's bits."""
    from fp8kit._kernels.native import xo_entry

    if xo_entry() is None:
        pytest.skip("this interpreter's array layout is not the native entries'")
    x = data((100,))
    for name in ("float8_e4m3fn", "bfloat16", "float4_e2m1fn"):
        fp8kit.encode(x, name)
        fp8kit.round_to(x, name)
    xo = codec._FAST_ENCODE[("float4_e2m1fn", x.dtype, True)][5]
    assert xo is not None and codec._FAST_ROUND[("float4_e2m1fn", x.dtype, True)][5] is not None
    with full_path():
        want = fp8kit.encode(x, "float4_e2m1fn")
    out = np.full(100, 0xEE, np.uint8)
    assert xo(x, out, ~1000) == 0
    same(want, out)
    for n in (0, 1, 2):
        o = np.full(n, 0xEE, np.uint8)
        assert xo(x[:n].copy(), o, ~1000) == 0
        same(want[:n], o)

    class Sub(np.ndarray):
        pass

    ro = np.empty(100, np.uint8)
    ro.flags.writeable = False
    buf = np.zeros(401, np.uint8)
    unaligned = buf[1:].view(np.float32)
    unaligned[:] = x
    shared = x.copy()
    refused = [
        (x.view(Sub), np.empty(100, np.uint8), ~1000),
        (x, np.empty(100, np.uint8).view(Sub), ~1000),
        (x.reshape(10, 10), np.empty((10, 10), np.uint8), ~1000),
        (x, np.empty(99, np.uint8), ~1000),
        (x, np.empty(100, np.uint8), ~100),  # (the limit: 100 elements or more refused)
        (x[::2], np.empty(50, np.uint8), ~1000),
        (x, np.empty(200, np.uint8)[::2], ~1000),
        (unaligned, np.empty(100, np.uint8), ~1000),
        (x, ro, ~1000),
        (shared, shared.view(np.uint8)[:100], ~1000),
        (shared[1:], shared.view(np.uint8)[:99], ~1000),
        (x, np.empty(100, np.uint8), "no int"),
    ]
    for xs, o, spec in refused:
        before = o.copy()
        assert xo(xs, o, spec) == 1
        np.testing.assert_array_equal(o, before)
    # and the calls that meet them take the full path, with its bits
    same(want[::2], fp8kit.encode(x[::2], "float4_e2m1fn"))
    same(want, fp8kit.encode(unaligned, "float4_e2m1fn"))
    y = shared.copy()
    r = fp8kit.round_to(y, "float4_e2m1fn")
    same(r, fp8kit.round_to(y, "float4_e2m1fn", out=y).copy())


def test_the_array_flag_bits_are_numpys():
    """The flag bits launch_compiled and the native entries read are numpy's own: an
    array, a strided view, a read-only one and one at an odd address each show them."""
    from fp8kit import _parallel as par

    a = np.zeros(8, np.float32)
    assert a.flags.num & par.BEHAVED == par.BEHAVED and a.flags.num & par.WRITEABLE
    assert not a[::2].flags.num & par.C_CONTIGUOUS and a[::2].flags.aligned
    odd = np.zeros(33, np.uint8)[1:].view(np.float32)
    assert not odd.flags.num & par.ALIGNED and odd.flags.c_contiguous
    a.flags.writeable = False
    assert not a.flags.num & par.WRITEABLE
    assert not par._unaligned(a) and par._unaligned(a[::2]) and par._unaligned(odd)
