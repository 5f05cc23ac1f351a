"""Kernels of the quantization-error studies: error metrics and grouped amax.

Both are one pass over the data with float64 accumulators, split into contiguous chunks
(one per thread); each chunk writes its own row of partial results and Python combines the
rows (sums add, maxima take the max), so no two threads touch the same accumulator.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import from_dtype, prange, types

from .codec import Kernel, source_version

#: Columns of the metrics kernel's partial-result rows.
SUM_SQ_ERR, SUM_SQ_SIG, MAX_ABS, MAX_REL = 0, 1, 2, 3
NAN_IN, INF_IN, LOST, FLUSHED, SATURATED, SUBNORMAL = 4, 5, 6, 7, 8, 9
N_METRICS = 10
_MAX_COLUMNS = (MAX_ABS, MAX_REL)


def _arr(dt, ndim=1, readonly=True):
    return types.Array(from_dtype(np.dtype(dt)), ndim, "C", readonly=readonly)


@functools.cache
def metrics_kernel(data_dtype: np.dtype, inner_runs: bool) -> Kernel:
    """Kernel ``(x, q, scale, shape, sstr, limits, out, nchunks)``.

    x, q: float32 or float64 data and its quantized values, C-contiguous 1-D; scale: float64,
    the multiplier applied before rounding (FakeConvert's), read through int64[4] merged
    ``shape`` and scale strides ``sstr`` as in :mod:`fp8kit._kernels.fake`; limits: float64
    ``[format max, format smallest normal]``; out: float64 ``(nchunks, N_METRICS)``.

    Per element, in float64 (exact for float32 data: products and differences of two
    float32 numbers fit in 53 bits): non-finite x is only counted; a finite x whose q is not
    finite is counted as lost; all other elements enter the sums, maxima and counts.
    """
    version = source_version()
    sig = types.void(
        _arr(data_dtype), _arr(data_dtype), _arr(np.float64), _arr(np.int64), _arr(np.int64),
        _arr(np.float64), _arr(np.float64, 2, readonly=False), types.intp,
    )  # fmt: skip
    inf = np.float64(np.inf)
    zero = np.float64(0.0)
    slack = np.float64(1.0 - 2.0**-50)

    def make(parallel):
        def kernel(x, q, scale, shape, sstr, limits, out, nchunks):
            if version == 0 or parallel is None:  # see codec.source_version
                return
            ovf, tie_up, tiny = limits[0], limits[1] != zero, limits[2]
            n1, n2, n3 = shape[1], shape[2], shape[3]
            total = shape[0] * n1 * n2 * n3
            step = (total + nchunks - 1) // nchunks
            for c in prange(nchunks):
                se = zero
                ss = zero
                mabs = zero
                mrel = zero
                rel_bound = zero
                nan_in = 0
                inf_in = 0
                lost = 0
                flushed = 0
                sat = 0
                sub = 0
                i = c * step
                hi = min(i + step, total)
                while i < hi:  # the chunk, one row segment at a time
                    r, j0 = i // n3, i % n3
                    j1 = min(n3, j0 + hi - i)
                    a, rest = r // (n1 * n2), r % (n1 * n2)
                    base = a * sstr[0] + (rest // n2) * sstr[1] + (rest % n2) * sstr[2]
                    xr = x[i : i + j1 - j0]
                    qr = q[i : i + j1 - j0]
                    s0 = scale[base]
                    for jj in range(xr.size):
                        s = scale[base + j0 + jj] if inner_runs else s0
                        xv = np.float64(xr[jj])
                        qv = np.float64(qr[jj])
                        ax = abs(xv)
                        aq = abs(qv)
                        if ax < inf and aq < inf:
                            e = qv - xv
                            se += e * e
                            ss += xv * xv
                            ae = abs(e)
                            mabs = ae if ae > mabs else mabs
                            # a multiply instead of a division per element; the slack keeps
                            # every candidate within rounding of the maximum
                            if ae > rel_bound * ax and ax != zero:
                                rel = ae / ax
                                if rel > mrel:
                                    mrel = rel
                                    rel_bound = rel * slack
                            flushed += (qv == zero) & (ax != zero)
                            y = ax * s
                            sat += (y > ovf) | ((y == ovf) & tie_up)
                            sub += (qv != zero) & (aq * s < tiny)
                        elif xv != xv:  # NaN or +-Inf input: reported, never summed
                            nan_in += 1
                        elif ax == inf:
                            inf_in += 1
                        else:
                            lost += 1
                    i += j1 - j0
                row = out[c]
                row[0] = se
                row[1] = ss
                row[2] = mabs
                row[3] = mrel
                row[4] = nan_in
                row[5] = inf_in
                row[6] = lost
                row[7] = flushed
                row[8] = sat
                row[9] = sub

        return kernel

    return Kernel(make, sig)


def combine(partials: np.ndarray) -> np.ndarray:
    """Combine per-chunk rows: maxima for the max columns, sums for the rest."""
    total = partials.sum(axis=0)
    for col in _MAX_COLUMNS:
        total[col] = partials[:, col].max()
    return total


@functools.cache
def amax_kernel(data_dtype: np.dtype) -> Kernel:
    """Kernel ``(x, dims, out_amax, out_bad, nchunks)``: the largest finite ``|x|`` of each
    group and whether the group holds a NaN or an Inf.

    x: float32 or float64, C-contiguous 1-D, seen as ``(pre, length, post)``;
    dims: int64 ``[pre, length, post, block, g_pre, g_block, g_post]``: element ``(i, l, k)``
    belongs to group ``i * g_pre + (l // block) * g_block + k * g_post`` (all-zero group
    strides: one group for the tensor; ``g_block=1``, ``block=1``: one group per channel
    along the middle axis; blocks of ``block`` elements along it, the last one shorter when
    ``length`` is not a multiple).  out_amax, out_bad: float64 ``(nchunks, groups)``, zeroed.
    """
    version = source_version()
    sig = types.void(
        _arr(data_dtype), _arr(np.int64), _arr(np.float64, 2, readonly=False),
        _arr(np.float64, 2, readonly=False), types.intp,
    )  # fmt: skip
    inf = np.float64(np.inf)
    one = np.float64(1.0)

    def make(parallel):
        def kernel(x, dims, out_amax, out_bad, nchunks):
            if version == 0 or parallel is None:  # see codec.source_version
                return
            length, post, block = dims[1], dims[2], dims[3]
            g_pre, g_block, g_post = dims[4], dims[5], dims[6]
            step = (x.size + nchunks - 1) // nchunks
            for c in prange(nchunks):
                lo = c * step
                xc = x[lo : min(lo + step, x.size)]
                am = out_amax[c]
                bad = out_bad[c]
                # position of the chunk's first element, then counters instead of divisions
                i = lo // (length * post)
                rem = lo % (length * post)
                ll, k = rem // post, rem % post
                lb, lr = ll // block, ll % block
                for j in range(xc.size):
                    g = i * g_pre + lb * g_block + k * g_post
                    v = abs(np.float64(xc[j]))
                    if v < inf:
                        am[g] = v if v > am[g] else am[g]
                    else:
                        bad[g] = one
                    k += 1
                    if k == post:
                        k = 0
                        ll += 1
                        lr += 1
                        if lr == block:
                            lr = 0
                            lb += 1
                        if ll == length:
                            ll = 0
                            lr = 0
                            lb = 0
                            i += 1

        return kernel

    return Kernel(make, sig)


def overflow_threshold(fmt) -> tuple[float, bool]:
    """``(threshold, tie_up)``: the magnitude from which rounding to nearest-even with an
    unbounded exponent goes above the format's max (max plus half its last step), and
    whether a value exactly there rounds up (when max's mantissa is odd).  Saturation only
    changes values beyond it; those between max and it round to max anyway."""
    step = 2.0 ** (fmt.maxexp - 1 - fmt.mantissa_bits)
    return fmt.max + step / 2, bool(fmt.max_code & 1)
