"""The fused FakeConvert kernel: ``(round(x * scale - shift) + shift) / scale`` in one pass.

Data of up to 4 (merged) dimensions is walked row by row; ``scale`` and ``shift`` are read
through their broadcast strides (0 along broadcast dimensions), so they are never expanded
to the size of the data.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np
from numba import from_dtype, njit, types

from ..formats import FloatFormat, get_format
from .bits import (
    STREAM_BYTES,
    as_bits,
    as_float,
    byte_address,
    cast_like,
    chunk_range,
    encode_fast,
    prefer_512,
    round_in_place,
    span,
    stack_buffer,
    store_fence,
    stream_copy,
    x86_nan,
)
from .codec import (
    Kernel,
    _params,
    load_o,
    load_p,
    load_q,
    pack_params,
    source_version,
    with_globals,
)
from .rounding import NEAREST_EVEN, encode_mode, flush_code, is_stochastic, parts, random_word

#: Elements per block of a streaming kernel: its buffer (4 KiB for float32) stays in L1.
_BLOCK = 1024

# Data type codes of the kernels (also the argument of _to16/_from16).
F32, F16, BF16 = 0, 1, 2
_KIND = {"float32": F32, "float16": F16, "bfloat16": BF16}

# The ``openvino`` argument of the kernels: the formula, or the arithmetic of OpenVINO's CPU
# device on x86 CPUs with AVX512-FP16 (float16 nodes, hardware float16 conversion) or
# without it (float16 models run in float32, software float32 -> float16 conversion).
SPEC, OV_FP16, OV_F32 = 0, 1, 2


def _arr(dt, ndim=1, readonly=True):
    return types.Array(from_dtype(np.dtype(dt)), ndim, "C", readonly=readonly)


@functools.cache
def round_params(fmt: FloatFormat):
    """Parameters of :func:`round_in_place` for float32 bits: nearest-even to ``fmt``'s
    values, overflow and Inf -> +-max, NaN -> quiet NaN.  (Cached: ``fmt.max`` is exact
    rational arithmetic, a fifth of a 1,000-element fake_convert's time.)"""
    u = np.uint32
    sh = 23 - fmt.mantissa_bits
    min_normal = (fmt.minexp + 127) << 23
    use_magic = fmt.minexp > -126
    max_bits = int(np.array([fmt.max], np.float32).view(np.uint32)[0])
    return (
        u(0x7FFFFFFF), u(1), u((1 << (sh - 1)) - 1), (u(~((1 << sh) - 1) & 0xFFFFFFFF), u(sh)),
        u(min_normal), np.float32(2.0 ** (fmt.minexp - fmt.mantissa_bits + 23)), bool(use_magic),
        u(0x7F800000), u(max_bits), u(0x7FC00000), u(0x80000000), bool(fmt.has_negative_zero),
        u(0),
    )  # fmt: skip


_R8, _MX, _NFAKE = 37, 51, 52


def fake_params(fmt: FloatFormat) -> np.ndarray:
    """The run-time parameters of a FakeConvert kernel for ``fmt`` (uint32): the tuples of
    the integer rounding path (see :func:`fp8kit._kernels.codec.pack_params`), then those of
    :func:`round_params` and the format's max as float32 bits."""
    pm, qm = _params(fmt, "float32", True)
    base = pack_params(pm, qm, (pm[9], pm[9]))
    r8 = round_params(fmt)
    flat = list(r8[:3]) + list(r8[3]) + list(r8[4:])
    words = [int(np.array(v).view(np.uint32)) if isinstance(v, np.float32) else int(v)
             for v in flat]  # fmt: skip
    prm = np.zeros(_NFAKE, np.uint32)
    prm[: base.size] = base
    prm[_R8 : _R8 + len(words)] = words
    prm[_MX] = int(np.array(np.float32(fmt.max)).view(np.uint32))
    prm.flags.writeable = False
    return prm


@njit(inline="always")
def load_r(prm, use_magic, neg_zero):
    """:func:`round_params` from a FakeConvert parameter array, flags given."""
    return (
        prm[37], prm[38], prm[39], (prm[40], prm[41]), prm[42], as_float(prm[43]), use_magic,
        prm[45], prm[46], prm[47], prm[48], neg_zero, prm[50],
    )  # fmt: skip


@njit(inline="always")
def _to16(f, kind, q16):
    """float32 -> float16 (F16) or bfloat16 (BF16) code as the OpenVINO CPU plugin stores
    it: nearest-even; NaN keeps its sign and top payload bits (quiet); bfloat16 stores
    (vcvtneps2bf16) flush float32 subnormals to signed zero."""
    one = np.uint32(1)
    b = as_bits(f)
    if kind == F16:
        nan16 = (
            cast_like((b >> 16) & np.uint32(0x8000), one)
            | np.uint32(0x7E00)
            | cast_like((b >> 13) & np.uint32(0x3FF), one)
        )
        return nan16 if f != f else cast_like(encode_fast(b, q16), one)
    nan16 = cast_like((b >> 16) | np.uint32(0x40), one)
    flushed = cast_like((b >> 16) & np.uint32(0x8000), one)
    rne = cast_like(cast_like(b + np.uint32(0x7FFF) + ((b >> 16) & one), one) >> 16, one)
    if f != f:
        return nan16
    return flushed if (b & np.uint32(0x7F800000)) == np.uint32(0) else rne


@njit(inline="always")
def ov_round16(b, r16, variant):
    """float32 bits -> float32 bits of the float16 value OpenVINO's CPU device rounds them
    to before float8 (no overflow: the value is clamped to a float8 max first).

    With AVX512-FP16 that is nearest-even.  Without it, the plugin's software conversion
    slips where a value of the binades 2**-18 .. 2**-16 (float16 subnormals) has its top 11
    fraction bits set: it gives 2**(e + 2) instead of 2**(e + 1) or less (measured: every
    float32 in [2**-27, 2**-13] against the CPU device, docs/fake_convert.md)."""
    if variant == OV_F32:
        e = (b >> np.uint32(23)) & np.uint32(0xFF)
        if e - np.uint32(109) <= np.uint32(2) and (b & np.uint32(0x7FF000)) == np.uint32(0x7FF000):
            return (b & np.uint32(0x80000000)) | ((e + np.uint32(2)) << np.uint32(23))
    return round_in_place(b, r16)


@njit(inline="always")
def _from16(code, kind, lut):
    """float16 (through the exact float16 -> float32 table) or bfloat16 code -> float32."""
    one = np.uint32(1)
    if kind == F16:
        return as_float(lut[code])
    return as_float(cast_like(cast_like(code, one) << 16, one))


@njit(inline="always")
def _store(f, kind, q16, lut):
    """Round a float32 result to the data type and back, as a CPU-plugin node store does."""
    if kind == F32:
        return f
    return _from16(_to16(f, kind, q16), kind, lut)


@functools.cache
def fake_convert_kernel(
    fmt: FloatFormat,
    data_dtype: np.dtype,
    has_shift: bool,
    inner_runs: bool,
    openvino: int = SPEC,
    mode: int = NEAREST_EVEN,
    random_bits: int = 32,
    stream: bool = False,
    flush: bool = False,
) -> Kernel:
    """Kernel ``(x, scale, shift, lut, table, key, offset, shape, sstrides, out, nchunks)``.

    ``offset``: the flat index of ``x``'s first element in a larger array (stochastic
    rounding draws element ``i``'s random word from index ``offset + i``); 0 otherwise.
    The format's constants are bound at run time (:func:`fake_params`): formats share one
    compiled kernel where their code-path flags agree.

    x/out: data bits (uint32 for float32, uint16 for float16/bfloat16), C-contiguous 1-D;
    scale/shift: float32; shape, sstrides: int64[4] (merged shape, scale strides in elements).
    ``inner_runs``: scale varies along the innermost dimension (stride 1); otherwise it is
    constant along it (stride 0) and is hoisted out of the loop, which lets LLVM vectorize.
    ``openvino``: SPEC, or the OpenVINO CPU plugin's arithmetic: OV_FP16 or OV_F32 (see
    docs/fake_convert.md).
    ``lut`` is the float16 -> float32 table where float16 is loaded or stored.
    ``mode``: a rounding mode of :mod:`fp8kit._kernels.rounding` (spec mode only); modes
    other than nearest-even round through the integer path to a code and read its float32
    value from ``table``; ``key`` is the uint32[2] Philox key of stochastic rounding and
    ``offset`` the flat index of ``x[0]`` in the whole array (0 but for Dask blocks).
    ``stream``: write ``out`` with non-temporal stores, for outputs much larger than the
    caches (a plain store first reads the line it writes: a third of the memory traffic).
    ``flush``: subnormal results of the format become zeros of their sign (spec mode; the
    integer path, as for other modes).
    """
    kind = _KIND[np.dtype(data_dtype).name]
    bits_dt = np.uint32 if kind == F32 else np.uint16
    openvino = int(openvino)
    # the type of OpenVINO's nodes: float16 models run on float32 nodes without AVX512-FP16
    node = F32 if (openvino == OV_F32 and kind == F16) else kind
    r16 = round_params(get_format("float16"))
    q16 = _params(get_format("float16"), "float32", False)[0]
    # float32 result -> the data type (spec mode): one IEEE rounding, overflow to Inf
    q = q16 if kind != BF16 else _params(get_format("bfloat16"), "float32", False)[0]
    # the format's constants are a run-time argument (fake_params); only the flags that
    # choose code paths are compiled in
    pm, _ = _params(fmt, "float32", True)
    # (-0 or not is read at run time: fnuz formats share the kernels)
    r8_magic, m_magic = bool(round_params(fmt)[6]), bool(pm[7])
    stochastic = is_stochastic(mode)
    rbits = int(random_bits)
    split = parts(rbits)
    f32_one, f32_zero = np.float32(1.0), np.float32(0.0)
    version = source_version()
    flags = (r8_magic, m_magic)
    consts_text = repr(
        (kind, has_shift, inner_runs, openvino, mode, rbits, stream, flags, version, flush)
    )
    # an int (a string's ``len`` compiles a unicode overload on a cold first call, ~20 ms)
    consts = int.from_bytes(hashlib.sha256(consts_text.encode()).digest()[:6], "little") + 1
    sig = types.void(
        _arr(np.uint32), _arr(bits_dt), _arr(np.float32), _arr(np.float32), _arr(np.uint32),
        _arr(np.uint32), _arr(np.uint32), types.int64, _arr(np.int64), _arr(np.int64),
        _arr(bits_dt, readonly=False), types.intp,
    )  # fmt: skip

    buf_size = _BLOCK if stream else 1

    def make(parallel):
        def segment_py(
            xr, orow, scale, shift, lut, table, k0, k1, kb, ib, s0, h0, fix_nan, fp
        ):  # fmt: skip
            """Elements ``xr`` -> ``orow``: scale index ``kb + jj``, flat index ``ib + jj``;
            ``fp``: the format's constants (r8, pm, qm, om, mx)."""
            r8, pm, qm, om, mx = fp
            for jj in range(xr.size):
                k = kb + jj
                s = scale[k] if inner_runs else s0
                v = as_float(xr[jj]) if kind == F32 else _from16(xr[jj], kind, lut)
                # x86 returns the first NaN operand, and LLVM may swap the operands of a
                # commutative operation: fix which NaN a NaN * NaN gives (the CUDA twin
                # rebuilds the same bits, fp8kit/cuda/_scalar.py)
                y = x86_nan(v * s, v, s) if fix_nan else v * s
                if has_shift:
                    y = y - (shift[k] if inner_runs else h0)
                if openvino:
                    # clamp (NaN -> -max), store in the nodes' type, round to float16, then float8
                    y = -mx if y != y else (mx if y > mx else (-mx if y < -mx else y))
                    y = _store(y, node, q16, lut)
                    # |y| <= max of a float8 format < float16's max: no overflow, so
                    # rounding in place equals the float16 store and load
                    # (the bits passed on: ov_round16's are 64-bit, and a float64 y would
                    # be y's one type where Numba types without SSA, see
                    # fp8kit._kernels.native._lean_pipeline)
                    qv = as_float(round_in_place(ov_round16(as_bits(y), r16, openvino), r8))
                    rr = f32_one / s
                    if has_shift:
                        rr = _store(rr, node, q16, lut)
                        hv = shift[k] if inner_runs else h0
                        neg = _store(f32_zero - hv, node, q16, lut)
                        av = qv - neg
                        res = av + av if av != av else av * rr
                    else:
                        res = qv * rr
                    if kind == F32:
                        orow[jj] = as_bits(res)
                    else:
                        orow[jj] = _to16(res, kind, q16)
                    continue
                if mode == NEAREST_EVEN and not flush:
                    fq = as_float(round_in_place(as_bits(y), r8))
                else:
                    yc = mx if y > mx else (-mx if y < -mx else y)
                    rnd = k0
                    if stochastic:
                        rnd = random_word(np.uint64(ib + jj), k0, k1, split)
                    code = encode_mode(as_bits(yc), pm, qm, om, mode, rnd, rbits)
                    if flush:
                        code = flush_code(code, pm, qm[5])
                    fq = as_float(table[code])
                if has_shift:
                    hk = shift[k] if inner_runs else h0
                    fq = x86_nan(fq + hk, fq, hk) if fix_nan else fq + hk
                res = fq / s
                if kind == F32:
                    orow[jj] = as_bits(res)
                else:
                    orow[jj] = encode_fast(as_bits(res), q)

        def kernel(prm, x, scale, shift, lut, table, key, offset, shape, sstr, out, nchunks):
            if version == 0 or parallel is None or consts == 0:  # consts: see below
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            # (nearest-even rounds in place: the integer path's 26 constants are not loaded,
            # which spares their typing and lowering on a cold first call)
            if mode == NEAREST_EVEN and not flush:
                fp = (load_r(prm, r8_magic, prm[49] != 0), 0, 0, 0, as_float(prm[_MX]))
            else:
                fp = (load_r(prm, r8_magic, prm[49] != 0), load_p(prm, m_magic, prm[15] != 0),
                      load_q(prm), load_o(prm), as_float(prm[_MX]))  # fmt: skip
            k0, k1 = key[0], key[1]
            n1, n2, n3 = shape[1], shape[2], shape[3]
            total = shape[0] * n1 * n2 * n3
            step = (total + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                prefer_512()  # see bits.prefer_512
                # (a stack buffer: np.empty's overloads cost ~85 ms on a cold first call)
                buf = stack_buffer(buf_size, bits_dt)
                i = c * step
                hi = i + step if i + step < total else total  # (not min: see bits.chunk)
                # Row coordinates (a, b, d) and offset j0 of the chunk's first element; later
                # rows are reached by carrying, not by integer divisions (~300 cycles a row).
                r, j0 = i // n3, i % n3
                a, rest = r // (n1 * n2), r % (n1 * n2)
                b, d = rest // n2, rest % n2
                # staged flat range [bstart, bend) of out; its first end is a line boundary
                bstart = i
                bend = i + _BLOCK - (byte_address(out, i) % STREAM_BYTES) // out.itemsize
                while i < hi:  # the chunk, one row segment at a time
                    j1 = n3 if n3 < j0 + hi - i else j0 + hi - i
                    base = a * sstr[0] + b * sstr[1] + d * sstr[2]
                    s0 = scale[base]
                    h0 = shift[base] if has_shift else s0
                    # Both operands of v * s or fq + h can be NaN only where s or h is: with a
                    # row-constant s and h that are numbers, the plain operations give x86's
                    # bits already.  The flag is loop-invariant: LLVM unswitches the loop into
                    # one with and one without x86_nan (which measured 20% of the per-channel
                    # time), from one inlined copy of segment (two copies, one per constant
                    # flag, compiled 1.5 s against 1.2 s of CPU for the same speed: 4M
                    # float32 with per-row scales, 1 thread, 1.8-2.4 ms either way).
                    fix_nan = inner_runs or s0 != s0 or h0 != h0
                    # (streaming: the output is staged in a cache-resident buffer that covers
                    # whole cache lines of out, rows after rows, and written with
                    # non-temporal stores when full: plain stores to a line next to streamed
                    # ones measured very slow, so only the chunk's two ends get them)
                    p0 = j0 - j0  # (int64 from the start: see metrics.count0)
                    while p0 < j1 - j0:
                        m = j1 - j0 - p0
                        if stream:
                            m = m if m < bend - (i + p0) else bend - (i + p0)
                            orow = span(buf, i + p0 - bstart, i + p0 - bstart + m)
                        else:
                            orow = span(out, i + p0, i + p0 + m)
                        xr = span(x, i + p0, i + p0 + m)
                        kb, ib = base + j0 + p0, offset + i + p0
                        if inner_runs:  # (fix_nan: a constant, so no second loop)
                            segment(xr, orow, scale, shift, lut, table, k0, k1, kb, ib, s0, h0,  # noqa: F821
                                    True, fp)  # fmt: skip
                        else:
                            segment(xr, orow, scale, shift, lut, table, k0, k1, kb, ib, s0, h0,  # noqa: F821
                                    fix_nan, fp)  # fmt: skip
                        p0 += m
                        if stream and i + p0 == bend:
                            stream_copy(out, bstart, buf, bend - bstart)
                            bstart, bend = bend, bend + _BLOCK
                    i += j1 - j0
                    j0 = 0
                    d += 1
                    if d == n2:
                        d = 0
                        b += 1
                        if b == n1:
                            b = 0
                            a += 1
                if stream:
                    if hi > bstart:
                        stream_copy(out, bstart, buf, hi - bstart)
                    store_fence()

        # segment is a global of the kernel, not a closure cell (see codec.with_globals);
        # consts, in the kernel's closure, is all it depends on beyond the kernel's own
        return with_globals(kernel, consts, segment=njit(inline="always")(segment_py))

    key = ("fake", consts_text)
    return Kernel(make, sig, key, fake_params(fmt))
