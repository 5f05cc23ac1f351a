"""One kernel for study.quantize's recipes on float32 data: the amaxes, and FakeConvert with
the scales they give, in one Numba kernel.

A ``study.quantize`` of float32 data with a recipe runs this one kernel (not the runs'
amax, then FakeConvert's rows or scalar kernel); it walks the runs itself (see
:func:`quantize_kernel`) and takes what it does per call:

=====  =================================================================================
mode   per run ``t``
=====  =================================================================================
0      ``amax[t]``: the largest finite ``|x|`` (bits), ``bad[t]``: 1 if a NaN or Inf
1      FakeConvert (:func:`fp8kit._kernels.metrics.fake_round`) with ``scale[t]``
2      MX block scaling in one pass: the run's amax, its E8M0 code (``amax[t]``; 255 for a
       run holding a NaN or an Inf, whose elements all become NaN), FakeConvert with
       ``2**(127 - code)``
=====  =================================================================================

Runs are those of :func:`fp8kit._kernels.metrics.amax_runs_kernel`: the data seen as rows
of ``length`` elements, each row cut into runs of ``run`` elements (the last run of a row
shorter when the length is not a multiple).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, types

from .bits import as_bits, as_float, chunk_items, chunk_range, prefer_512, span
from .codec import _array, source_version
from .metrics import FlatKernel, fake_round, fake_rounding, run_amax

AMAX, FAKE, MX = 0, 1, 2
#: E8M0's NaN code (an MX run holding a NaN or an Inf).
MX_NAN = 255


@njit(inline="always")
def mx_code(amax, bad, emax):
    """E8M0 code of an MX run: ``floor(log2(amax)) - emax + 127`` (``amax``: the run's
    largest finite ``|x|``, float32 bits; a subnormal's exponent from its value scaled by
    2**64, exactly) clamped to E8M0's [0, 254] (an all-zero run 0), 255 (:data:`MX_NAN`)
    for a run holding a NaN or an Inf (``bad``) or beyond 254."""
    field = np.int64(amax >> np.uint32(23))
    scaled = np.int64(as_bits(as_float(amax) * np.float32(2.0**64)) >> np.uint32(23))
    log2 = field - 127 if field != 0 else scaled - (127 + 64)
    code = log2 - emax + 127
    code = 0 if code < 0 else code
    code = MX_NAN if code > 254 else code
    code = 0 if amax == np.uint32(0) else code
    return MX_NAN if bad else code


@njit(inline="always")
def mx_scale(code):
    """``2**(127 - code)`` as float32 (a subnormal for code 254)."""
    e2 = 127 - code
    if e2 >= -126:
        return as_float(np.uint32((e2 + 127) << 23))
    return as_float(np.uint32(1 << (e2 + 149)))


def _make(parallel):
    version = source_version()
    zero = np.uint32(0)
    one = np.uint32(1)
    mask = np.uint32(0x7FFFFFFF)
    inf_bits = np.uint32(0x7F800000)
    nan_bits = np.uint32(0x7FC00000)

    def kernel(consts, x, scale, out, dims, amax, bad, nchunks):
        if version == 0 or parallel is None:  # never true; see codec.source_version
            return
        nchunks, c_first, c_stop = chunk_range(nchunks)
        r8 = fake_rounding(consts)
        mode, length, run, emax = dims[0], dims[1], dims[2], dims[3]
        per_row = (length + run - 1) // run
        total = amax.size
        step = (total + nchunks - 1) // nchunks
        for c in range(c_first, c_stop):
            prefer_512()
            t0, t1 = chunk_items(c, step, total)
            r = t0 // per_row
            b = t0 % per_row
            for t in range(t0, t1):
                rest = length - b * run
                n = run if run < rest else rest
                lo = r * length + b * run
                b += 1
                wrap = b == per_row
                r = r + 1 if wrap else r
                b = 0 if wrap else b
                top, fin = zero, zero
                if mode != FAKE:
                    top, fin = run_amax(x, lo, n, mask, inf_bits, zero)
                if mode == AMAX:
                    amax[t] = fin
                    bad[t] = one if top >= inf_bits else zero
                    continue
                code = mx_code(fin, top >= inf_bits, emax)
                if mode == MX:
                    amax[t] = np.uint32(code)
                s = mx_scale(code) if mode == MX else scale[t]
                dst = span(out, lo, lo + n)
                if mode == MX and code == MX_NAN:  # (a NaN or an Inf: every element NaN)
                    for j in range(n):
                        dst[j] = nan_bits
                    continue
                src = span(x, lo, lo + n)
                for j in range(n):
                    dst[j] = as_bits(fake_round(as_float(src[j]), s, r8))

    return kernel


@functools.cache
def quantize_kernel() -> FlatKernel:
    """Kernel ``(consts, x, scale, out, dims, amax, bad, nchunks)``: runs ``t`` in the mode
    ``dims[0]`` (see the module), with ``dims = [mode, length, run, emax_elem]``
    (``emax_elem``: the exponent of the element format's largest normal, MX mode only);
    ``consts``: :func:`fp8kit._kernels.encode16.fake_scalars` of the format; x, out:
    float32 bits, C-contiguous 1-D; scale: float32, one per run (FAKE mode); amax, bad:
    uint32, one per run (the chunks split the runs; a chunk's first run's row computed
    once, then counted on).  FakeConvert as :func:`fp8kit._kernels.metrics.fake_round`.
    The caller checks what :func:`fp8kit._kernels.encode16.fake_kernel` needs: float32
    data, an 8-bit format that rounds in place, nearest-even, no NaN scale (FAKE mode)."""
    ro = functools.partial(_array, readonly=True)
    sig = types.void(
        ro(np.uint32), ro(np.uint32), ro(np.float32), _array(np.uint32), ro(np.int64),
        _array(np.uint32), _array(np.uint32), types.intp,
    )  # fmt: skip
    return FlatKernel(_make, sig, key=("quantize32", source_version()))
