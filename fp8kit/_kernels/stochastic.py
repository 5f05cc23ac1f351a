"""Stochastic rounding of float32, bfloat16, float16 and float64 data to formats of up to 16
bits: the kernel of :func:`fp8kit._kernels.codec.encode_mode_kernel` for the stochastic
modes, written in Numba.

The same bits as that function's own kernel (``vector=False``, the tests' reference), from
the same random words (:mod:`fp8kit._kernels.rounding`: Philox4x32-10, element ``i`` of a
block of ``4 * K * S`` elements using part ``(i // K) % S`` of word ``i // (K * S)`` of the
call with counter ``block * K + i % K``), in loops per block:

1. the block's random words, :func:`fp8kit._kernels.rounding.fill_block`: one loop over
   the K Philox calls (64-bit lanes below 2**32, so that the 32 x 32 -> 64 products are
   one vpmuludq), into a buffer on the stack;
2. the block's ``4 * S`` runs of K elements, run ``(t, h)`` reading part ``h`` of word
   ``t``: :func:`fp8kit._kernels.rounding.encode_stochastic_fast` (or the rule of the
   variants, of float8_e8m0fnu) and :func:`fp8kit._kernels.bits._finish_with` per element,
   into a buffer of codes on the stack (which LLVM knows aliases neither x nor out);
3. the codes stored (encode), or their values looked up in the decode table's byte planes
   (round_to, AVX512-VBMI: :func:`fp8kit._kernels.bits.plane_lookup`) or table.
"""

from __future__ import annotations

import numpy as np

from .bits import (
    block_items,
    cast_like,
    chunk_range,
    load_bits,
    load_o,
    load_p,
    load_q,
    load_qu,
    load_sp,
    plane_lookup,
    prefer_512,
    span,
    stack_buffer,
)
from .rounding import (
    STOCHASTIC,
    K,
    encode_mode_kind,
    encode_stochastic_fast,
    encode_unsigned_mode,
    fill_block,
    flush_code,
    mode_masks,
    parts,
    word_part,
)


def sr_make(
    load, unsigned, kind, mode, fast, rbits, flush, use_magic, sp_magic, planes, lookup,
    code_type, version,
):  # fmt: skip
    """``make`` of the stochastic kernel (:class:`fp8kit._kernels.codec.Kernel`, signature
    ``(prm, x, lut, table, out, key, offset, nchunks)`` as the other kernels of
    :func:`fp8kit._kernels.codec.encode_mode_kernel`): ``load`` the data's load rule,
    ``mode`` (compiled in) the stochastic mode, ``fast`` where ``prm`` holds
    :func:`fp8kit._kernels.codec.stochastic_params`' constants, ``planes`` where ``table``
    is the decode table's byte planes, ``lookup`` where the kernel writes values
    (``table``'s entries) instead of codes (``code_type``)."""
    split = parts(rbits)
    streams = 4 * split
    block = streams * K
    lookup_each = lookup and not planes
    nwords = 4 * K  # (a closure constant: stack_buffer's size)

    def make(parallel):
        # (closure constants only: see encode_mode_kernel's make)
        def kernel(prm, x, lut, table, out, key, offset, nchunks):
            if version == 0 or parallel is None:  # see registry.source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            p = load_p(prm, use_magic, prm[15] != 0)
            if unsigned:
                q = load_qu(prm)
            else:
                q = load_q(prm)
            o = load_o(prm)
            sp = load_sp(prm, sp_magic)
            one = p[1]
            mm = mode_masks(mode, one)
            k0, k1 = key[0], key[1]
            n = x.size
            # chunks of whole blocks, counted from the start of the whole array: x starts
            # at its element ``offset``
            step = ((n + nchunks - 1) // nchunks + block - 1) // block * block
            end = offset + n
            words = stack_buffer(nwords, np.uint32)  # words[t * K + g]: see fill_block
            codes = stack_buffer(K, code_type)
            for c in range(c_first, c_stop):
                prefer_512()  # see bits.prefer_512 (Philox's 64-bit products gain most)
                glo, ghi = block_items(c, nchunks, step, offset, end, block)
                gb = glo // block * block
                while gb < ghi:
                    lo = gb if gb > glo else glo
                    hi = gb + block if gb + block < ghi else ghi
                    fill_block(words, gb // block, k0, k1)
                    for s in range(streams):
                        s0 = gb + s * K
                        r0 = s0 if s0 > lo else lo
                        r1 = s0 + K if s0 + K < hi else hi
                        if r0 < r1:
                            xs = span(x, r0 - offset, r1 - offset)
                            w0 = (s // split) * K + r0 - s0
                            ws = span(words, w0, w0 + xs.size)
                            h = cast_like(s % split, k0)
                            for j in range(xs.size):
                                v = load_bits(xs, j, lut, load, one)
                                rnd = word_part(ws[j], h, split)
                                if unsigned:
                                    code = encode_unsigned_mode(v, q, STOCHASTIC, rnd, rbits)
                                elif fast:
                                    code = encode_stochastic_fast(v, p, sp, o, rnd, rbits)
                                else:
                                    code = encode_mode_kind(v, p, q, o, mode, kind, mm, rnd,
                                                            rbits)  # fmt: skip
                                if flush and not unsigned:
                                    code = flush_code(code, p, q[5])
                                codes[j] = code
                            os = span(out, r0 - offset, r1 - offset)
                            if planes:
                                plane_lookup(table, codes, os, xs.size)
                            elif lookup_each:
                                for j in range(xs.size):
                                    os[j] = table[codes[j]]
                            else:
                                for j in range(xs.size):
                                    os[j] = codes[j]
                    gb += block

        return kernel

    return make
