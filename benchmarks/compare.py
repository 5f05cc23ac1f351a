#!/usr/bin/env python
"""Time fp8kit side by side with ml_dtypes and torch, in one run, and print Markdown tables.

Usage::

    python benchmarks/compare.py [--size N] [--repeat R] [--threads T] [--json FILE]

What is measured (median of R samples per implementation, after one warm-up call that also
compiles fp8kit's kernels and faults in the output pages; samples of different
implementations are interleaved so that machine noise hits them alike, each preceded by a
20 ms pause (another library's idle OpenMP workers stop spinning) and an untimed call of the
same implementation):

* encode float32 -> each float8 format and bfloat16; decode those codes -> float32:
  ``fp8kit.encode/decode(..., out=preallocated)``, ``ml_dtypes`` as ``x.astype(dtype)``
  (allocates its result), ``ml_dtypes`` cast into a preallocated array with
  ``np.copyto(out, x, casting="unsafe")``, and torch ``out.copy_(src)`` into a preallocated
  tensor (``torch.from_numpy`` views, no copies);
* encode from float64 input;
* ``np.copyto`` of float32 -> float32, the memory-bandwidth baseline;
* fp8kit with 1 thread against T threads;
* a small array (4096 elements), where per-call overhead dominates;
* ``import fp8kit`` in a fresh interpreter, and the first encode/decode call in a fresh
  process with an empty temporary NUMBA_CACHE_DIR (compilation) and again in a second
  process with the now-filled cache (cache load).

Throughput is elements per second and (input + output bytes) per second.  Samples of small
arrays time a loop of calls long enough (>= 20 ms) to be measurable; times are per call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import ml_dtypes
import numpy as np

import fp8kit

try:
    import torch
except ImportError:  # torch is optional: its columns are left out
    torch = None

SEED = 0
FLOAT8_FORMATS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
FORMATS = FLOAT8_FORMATS + ("bfloat16",)
SMALL_SIZE = 4096
MIN_SAMPLE_SECONDS = 0.02
MAX_CALLS_PER_SAMPLE = 100_000
#: Pause before each sample: longer than the spin of another library's idle OpenMP workers.
QUIET_SECONDS = 0.02

FP8KIT = "fp8kit"
ML_ASTYPE = "ml_dtypes astype"
ML_COPYTO = "ml_dtypes copyto"
TORCH = "torch copy_"
COMPARED = (ML_ASTYPE, ML_COPYTO, TORCH)


@dataclass
class Impl:
    name: str
    run: Callable[[], object]
    bits: Callable[[], np.ndarray]  # output of the last run as unsigned ints, for checking


@dataclass
class Row:
    case: str
    impl: str
    size: int
    bytes_per_element: int
    seconds: float
    calls_per_sample: int
    samples: list[float] = field(repr=False)
    same_bits: str = ""

    @property
    def melem_s(self) -> float:
        return self.size / self.seconds / 1e6

    @property
    def gb_s(self) -> float:
        return self.size * self.bytes_per_element / self.seconds / 1e9


def ml_dtype(fmt: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, fmt))


def bits_dtype(itemsize: int) -> np.dtype:
    return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize])


def torch_dtype(fmt: str):
    if torch is None:
        return None
    dt = getattr(torch, fmt, None)
    return dt if isinstance(dt, torch.dtype) else None


def torch_bits(t) -> np.ndarray:
    signed = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()]
    a = t.view(signed).numpy()
    return a.view(bits_dtype(a.itemsize))


def encoders(x: np.ndarray, fmt: str) -> list[Impl]:
    code_dt = fp8kit.get_format(fmt).code_dtype
    out = np.empty(x.shape, code_dt)
    impls = [Impl(FP8KIT, lambda: fp8kit.encode(x, fmt, out=out), lambda: out)]
    dt = ml_dtype(fmt)
    bits = bits_dtype(dt.itemsize)
    impls.append(Impl(ML_ASTYPE, lambda: x.astype(dt), lambda: x.astype(dt).view(bits)))
    ml_out = np.empty(x.shape, dt)
    impls.append(
        Impl(
            ML_COPYTO,
            lambda: np.copyto(ml_out, x, casting="unsafe"),
            lambda: ml_out.view(bits),
        )
    )
    tdt = torch_dtype(fmt)
    if tdt is not None:
        t_x = torch.from_numpy(x)
        t_out = torch.empty(x.shape, dtype=tdt)
        impls.append(Impl(TORCH, lambda: t_out.copy_(t_x), lambda: torch_bits(t_out)))
    return impls


def decoders(codes: np.ndarray, fmt: str) -> list[Impl]:
    out = np.empty(codes.shape, np.float32)
    u32 = np.uint32
    impls = [Impl(FP8KIT, lambda: fp8kit.decode(codes, fmt, out=out), lambda: out.view(u32))]
    view = codes.view(ml_dtype(fmt))
    impls.append(
        Impl(ML_ASTYPE, lambda: view.astype(np.float32), lambda: view.astype(np.float32).view(u32))
    )
    ml_out = np.empty(codes.shape, np.float32)
    impls.append(
        Impl(
            ML_COPYTO,
            lambda: np.copyto(ml_out, view, casting="unsafe"),
            lambda: ml_out.view(u32),
        )
    )
    tdt = torch_dtype(fmt)
    if tdt is not None:
        signed = codes.view(np.int8 if codes.itemsize == 1 else np.int16)
        t_codes = torch.from_numpy(signed).view(tdt)
        t_out = torch.empty(codes.shape, dtype=torch.float32)
        impls.append(Impl(TORCH, lambda: t_out.copy_(t_codes), lambda: torch_bits(t_out)))
    return impls


def calls_per_sample(fn: Callable[[], object]) -> int:
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    if one >= MIN_SAMPLE_SECONDS:
        return 1
    return min(MAX_CALLS_PER_SAMPLE, math.ceil(MIN_SAMPLE_SECONDS / max(one, 1e-7)))


def measure(
    case: str, impls: list[Impl], size: int, bytes_per_element: int, repeat: int
) -> list[Row]:
    """Warm up and calibrate each implementation, then interleave R samples of each.

    Each timed sample follows a pause of :data:`QUIET_SECONDS` and an untimed call of the
    same implementation, so that no sample runs beside another library's idle workers:
    torch's OpenMP threads spin for several milliseconds after each of its calls (GNU
    OpenMP's default wait policy), on a 2-core machine one core of the next sample's two
    (measured: fp8kit float64 -> bfloat16 on 2 threads 4.3 ms right after torch, 3.5 ms
    with OMP_WAIT_POLICY=PASSIVE or this pause).  Interleaving spreads machine noise over
    all implementations."""
    numbers = []
    for impl in impls:
        impl.run()  # warm-up: compiles fp8kit kernels, faults in output pages
        numbers.append(calls_per_sample(impl.run))
    samples: list[list[float]] = [[] for _ in impls]
    for _ in range(repeat):
        for impl, number, acc in zip(impls, numbers, samples, strict=True):
            run = impl.run
            time.sleep(QUIET_SECONDS)
            run()
            t0 = time.perf_counter()
            for _ in range(number):
                run()
            acc.append((time.perf_counter() - t0) / number)
    reference = impls[0].bits()
    rows = []
    for impl, number, acc in zip(impls, numbers, samples, strict=True):
        if impl is impls[0]:
            same = "ref"
        else:
            got = impl.bits()
            diff = int(np.count_nonzero(got != reference))
            same = "yes" if diff == 0 else f"no ({diff} differ)"
        rows.append(
            Row(case, impl.name, size, bytes_per_element, statistics.median(acc), number, acc, same)
        )
    return rows


def codec_rows(size: int, repeat: int, threads: int) -> list[Row]:
    rng = np.random.default_rng(SEED)
    x32 = rng.standard_normal(size, dtype=np.float32)
    rows: list[Row] = []

    base = np.empty_like(x32)
    rows += measure(
        "memory baseline: copy float32 -> float32 (1 thread)",
        [Impl("np.copyto", lambda: np.copyto(base, x32), lambda: base.view(np.uint32))],
        size,
        8,
        repeat,
    )
    for fmt in FORMATS:
        nbytes = 4 + ml_dtype(fmt).itemsize
        rows += measure(f"encode float32 -> {fmt}", encoders(x32, fmt), size, nbytes, repeat)
    for fmt in FORMATS:
        codes = fp8kit.encode(x32, fmt)
        nbytes = codes.itemsize + 4
        rows += measure(f"decode {fmt} -> float32", decoders(codes, fmt), size, nbytes, repeat)

    x64 = x32.astype(np.float64)
    for fmt in ("float8_e4m3fn", "bfloat16"):
        nbytes = 8 + ml_dtype(fmt).itemsize
        rows += measure(f"encode float64 -> {fmt}", encoders(x64, fmt), size, nbytes, repeat)
    del x64

    fmt = "float8_e4m3fn"
    codes = fp8kit.encode(x32, fmt)
    for case, make in (
        (f"threads: encode float32 -> {fmt}", lambda: encoders(x32, fmt)[0]),
        (f"threads: decode {fmt} -> float32", lambda: decoders(codes, fmt)[0]),
    ):
        a, b = make(), make()  # separate outputs, so that 'same bits' compares two results
        one = Impl("fp8kit, 1 thread", _with_threads(a.run, 1), a.bits)
        many = Impl(f"fp8kit, {threads} threads", _with_threads(b.run, threads), b.bits)
        rows += measure(case, [one, many], size, 5, repeat)

    for small in (1000, SMALL_SIZE):
        xs = x32[:small].copy()
        for fmt in ("float8_e4m3fn", "bfloat16"):
            nbytes = 4 + ml_dtype(fmt).itemsize
            rows += measure(
                f"small ({small}): encode float32 -> {fmt}", encoders(xs, fmt), small, nbytes,
                repeat,
            )  # fmt: skip
            codes = fp8kit.encode(xs, fmt)
            rows += measure(
                f"small ({small}): decode {fmt} -> float32", decoders(codes, fmt), small,
                nbytes, repeat,
            )  # fmt: skip
    return rows


# ---------------------------------------------------------------- streaming limit


def _limit_kernel(in_dt: np.dtype, out_dt: np.dtype):
    """A trivial kernel with a conversion's memory traffic: read ``in_dt`` bits, write
    ``out_dt`` bits (a shift of each), split and threaded like fp8kit's own kernels."""
    from numba import types

    from fp8kit._kernels.bits import chunk, chunk_range
    from fp8kit._kernels.codec import Kernel, _array

    in_dt, out_dt = np.dtype(in_dt), np.dtype(out_dt)
    out_t = out_dt.type
    shift = out_t(max(0, 8 * (out_dt.itemsize - in_dt.itemsize)))
    down = in_dt.type(max(0, 8 * (in_dt.itemsize - out_dt.itemsize)))
    sig = types.void(_array(in_dt, True), _array(np.uint32, True), _array(np.uint8, True),
                     _array(out_dt), types.intp)  # fmt: skip

    def make(parallel):
        def kernel(x, lut, table, out, nchunks):
            nchunks, c_first, c_stop = chunk_range(nchunks)
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                xc, oc = chunk(x, c, step), chunk(out, c, step)
                for j in range(xc.size):
                    oc[j] = out_t(xc[j] >> down) << shift

        return kernel

    return Kernel(make, sig)


def _limit_impl(x: np.ndarray, out_dt, name: str) -> Impl:
    from fp8kit import _parallel
    from fp8kit._kernels.codec import dummy

    xb = x.view(bits_dtype(x.itemsize))
    out = np.empty(x.shape, bits_dtype(np.dtype(out_dt).itemsize))
    k = _limit_kernel(xb.dtype, out.dtype)
    lut, table = dummy(np.uint32), dummy(np.uint8)
    return Impl(name, lambda: _parallel.launch(k, xb.size, xb, lut, table, out), lambda: out)


LIMIT = "streaming limit"


def limit_rows(size: int, repeat: int, threads: int) -> list[Row]:
    """Each conversion against the streaming-limit kernel of the same traffic, measured
    side by side, on 1 thread and on ``threads``."""
    rng = np.random.default_rng(SEED)
    x32 = rng.standard_normal(size, dtype=np.float32)
    inputs = {
        "float32": x32,
        "float64": x32.astype(np.float64),
        "bfloat16": x32.astype(ml_dtypes.bfloat16),
        "float16": x32.astype(np.float16),
    }
    rows: list[Row] = []
    for n in sorted({1, threads}):
        tag = f"{n} thread{'s' if n > 1 else ''}"
        cases = []
        for src in ("float32", "float64", "bfloat16", "float16"):
            x = inputs[src]
            fmts = ENCODE_FORMATS if src != "float64" else ("float8_e4m3fn", "bfloat16")
            for fmt in fmts:
                if fmt == src:
                    continue
                cases.append((f"limit {tag}: encode {src} -> {fmt}", x, fmt, "encode"))
        for fmt in FORMATS + MORE_8BIT + SUB_BYTE:
            cases.append((f"limit {tag}: decode {fmt} -> float32", x32, fmt, "decode"))
        for dt in ("float64", "bfloat16", "float16"):
            cases.append((f"limit {tag}: decode float8_e4m3fn -> {dt}", x32, dt, "decode_to"))
        # round-to-format keeps the dtype: the limit reads and writes float32
        for mode in ("nearest_even", "toward_zero", "stochastic"):
            case = f"limit {tag}: round_to float32 -> float8_e4m3fn values, {mode}"
            cases.append((case, x32, mode, "round_to"))
        for case, x, fmt, op in cases:
            if op == "round_to":
                out = np.empty_like(x)
                kw = {"rounding": fmt, "seed": 1 if fmt == "stochastic" else None}
                run = _with_threads(
                    lambda x=x, o=out, kw=kw: fp8kit.round_to(x, "float8_e4m3fn", out=o, **kw), n
                )
                fp = Impl(FP8KIT, run, lambda o=out: o.view(np.uint32))
                lim = _limit_impl(x, np.float32, LIMIT)
                nbytes = 2 * x.itemsize
            elif op == "decode_to":
                dt = np.dtype(ml_dtypes.bfloat16 if fmt == "bfloat16" else fmt)
                codes = fp8kit.encode(x, "float8_e4m3fn")
                out = np.empty(x.shape, dt)
                run = _with_threads(
                    lambda c=codes, o=out: fp8kit.decode(c, "float8_e4m3fn", out=o), n
                )
                fp = Impl(FP8KIT, run, lambda o=out: o.view(bits_dtype(o.itemsize)))
                lim = _limit_impl(codes, dt, LIMIT)
                nbytes = codes.itemsize + dt.itemsize
            elif op == "encode":
                code_dt = fp8kit.get_format(fmt).code_dtype
                out = np.empty(x.shape, code_dt)
                run = _with_threads(lambda x=x, f=fmt, o=out: fp8kit.encode(x, f, out=o), n)
                fp = Impl(FP8KIT, run, lambda o=out: o)
                lim = _limit_impl(x, code_dt, LIMIT)
                nbytes = x.itemsize + np.dtype(code_dt).itemsize
            else:
                codes = fp8kit.encode(x, fmt)
                out = np.empty(x.shape, np.float32)
                run = _with_threads(lambda c=codes, f=fmt, o=out: fp8kit.decode(c, f, out=o), n)
                fp = Impl(FP8KIT, run, lambda o=out: o.view(np.uint32))
                lim = _limit_impl(codes, np.float32, LIMIT)
                nbytes = codes.itemsize + 4
            lim = Impl(lim.name, _with_threads(lim.run, n), lim.bits)
            got = measure(case, [fp, lim], size, nbytes, repeat)
            got[1].same_bits = "n/a"
            rows += got
    return rows


def limit_table(rows: list[Row]) -> str:
    lines = [
        "| conversion | fp8kit ms | limit ms | fraction of the limit (limit time / fp8kit time) |",
        "|---|---:|---:|---:|",
    ]
    cases: dict[str, dict[str, Row]] = {}
    for r in rows:
        cases.setdefault(r.case, {})[r.impl] = r
    for case, impls in cases.items():
        if LIMIT in impls and FP8KIT in impls:
            f, lim = impls[FP8KIT].seconds, impls[LIMIT].seconds
            lines.append(f"| {case[6:]} | {_fmt_ms(f)} | {_fmt_ms(lim)} | {lim / f:.2f} |")
    return "\n".join(lines)


MORE_8BIT = ("float8_e4m3", "float8_e3m4", "float8_e4m3b11fnuz", "float8_e8m0fnu")
SUB_BYTE = ("float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
#: Every format an encode of the limit section writes (from float32, bfloat16, float16):
#: ml_dtypes' and one P3109 format of each kind of kernel (byte lanes, formula).
ENCODE_FORMATS = FORMATS + MORE_8BIT + SUB_BYTE + ("float16", "p3109_k8p3se", "p3109_k8p6sf",
                                                    "p3109_k8p1se", "p3109_k8p3uf")  # fmt: skip
ROUNDING = ("nearest_away", "toward_zero", "toward_positive", "toward_negative", "stochastic")


def more_rows(size: int, repeat: int) -> list[Row]:
    """Issue 8's formats: encode and decode against ml_dtypes (and torch where it has them)."""
    rng = np.random.default_rng(SEED)
    x32 = rng.standard_normal(size, dtype=np.float32)
    rows: list[Row] = []
    for fmt in MORE_8BIT + SUB_BYTE:
        rows += measure(f"encode float32 -> {fmt}", encoders(x32, fmt), size, 5, repeat)
    for fmt in MORE_8BIT + SUB_BYTE:
        codes = fp8kit.encode(x32, fmt)
        rows += measure(f"decode {fmt} -> float32", decoders(codes, fmt), size, 5, repeat)
    return rows


def rounding_rows(size: int, repeat: int) -> list[Row]:
    """Each rounding mode against nearest-even (the reference row), float32 -> e4m3fn."""
    rng = np.random.default_rng(SEED)
    x32 = rng.standard_normal(size, dtype=np.float32)
    rows: list[Row] = []
    for fmt in ("float8_e4m3fn", "bfloat16"):
        code_dt = fp8kit.get_format(fmt).code_dtype
        outs = {m: np.empty(size, code_dt) for m in ("nearest_even", *ROUNDING)}

        def impl(mode, fmt=fmt, outs=outs):
            kw = {"rounding": mode, "seed": 1 if mode == "stochastic" else None}
            out = outs[mode]
            return Impl(
                f"fp8kit rounding={mode}", lambda: fp8kit.encode(x32, fmt, out=out, **kw),
                lambda: out,
            )  # fmt: skip

        impls = [impl("nearest_even"), *(impl(m) for m in ROUNDING)]
        nbytes = 4 + np.dtype(code_dt).itemsize
        rows += measure(f"rounding modes: encode float32 -> {fmt}", impls, size, nbytes, repeat)
    return rows


def _with_threads(fn: Callable[[], object], n: int) -> Callable[[], object]:
    def run():
        with fp8kit.num_threads(n):
            return fn()

    return run


# ---------------------------------------------------------------- fresh-process measurements

_IMPORT_CODE = """
import time
t0 = time.perf_counter()
import {module}
print(time.perf_counter() - t0)
"""

_FIRST_CALL_CODE = """
import json, os, time
import ml_dtypes
import numpy as np
t0 = time.perf_counter()
import fp8kit
t_import = time.perf_counter() - t0
x = np.random.default_rng(0).standard_normal(4096, dtype=np.float32)
codes = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
t0 = time.perf_counter()
fp8kit.encode(x, "float8_e4m3fn")
t_enc1 = time.perf_counter() - t0
t0 = time.perf_counter()
fp8kit.encode(x, "float8_e4m3fn")
t_enc2 = time.perf_counter() - t0
t0 = time.perf_counter()
fp8kit.decode(codes, "float8_e4m3fn")
t_dec1 = time.perf_counter() - t0
print(json.dumps({"import": t_import, "encode_first": t_enc1, "encode_second": t_enc2,
                  "decode_first": t_dec1}))
"""


_FIRST_CALL_LABELS = {
    "import": "import fp8kit (numpy, ml_dtypes already imported)",
    "encode_first": "1st encode call float32 -> float8_e4m3fn",
    "encode_second": "2nd encode call, same process",
    "decode_first": "1st decode call float8_e4m3fn -> float32 (after the encode calls)",
}


def _python(code: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"subprocess failed:\n{proc.stderr}")
    return proc.stdout.strip().splitlines()[-1]


def import_times(module: str, repeat: int) -> list[float]:
    code = _IMPORT_CODE.format(module=module)
    return [float(_python(code)) for _ in range(repeat)]


def first_call_times(repeat: int) -> dict[str, list[float]]:
    """Per sample: a new empty cache dir; a cold process fills it, a second one reuses it."""
    out: dict[str, list[float]] = {}
    cache_files = []
    for _ in range(repeat):
        cache_dir = tempfile.mkdtemp(prefix="fp8kit-compare-numba-")
        try:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
            for label in ("empty cache", "warm cache"):
                if label == "warm cache":
                    cache_files.append(sum(len(f) for _, _, f in os.walk(cache_dir)))
                res = json.loads(_python(_FIRST_CALL_CODE, env))
                for key, value in res.items():
                    out.setdefault(f"{_FIRST_CALL_LABELS[key]}, {label}", []).append(value)
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
    out["cache files written by the cold process"] = cache_files
    return out


# Every public function that runs kernels, first called in a fresh process with an empty
# Numba cache (1M float32 elements: the threaded path; some on other dtypes), then the same
# call with another format (or, where the name says so, input dtype) in that warm process.
# (Kept in step with asv_bench's bench_import.py.)
PUBLIC_COLD = {
    # the floor: Numba's own first compile in a process (its set-up, ~0.3 s here, of which
    # ~0.15 s is Numba importing scipy.linalg to look for BLAS where scipy is installed)
    # and a trivial kernel, measured in the same run as the rest
    "trivial @njit (Numba's floor)": ("numba.njit(lambda a: a[0] + 1)(big)",
                                      "numba.njit(lambda a: a[0] + 1)(big64)"),
    "encode": ("fp8kit.encode(big, 'float8_e4m3fn')", "fp8kit.encode(big, 'float8_e5m2')"),
    "encode float64": ("fp8kit.encode(big64, 'float8_e4m3fn')",
                       "fp8kit.encode(big64, 'float8_e5m2')"),
    "encode bfloat16": ("fp8kit.encode(big16, 'float8_e4m3fn')",
                        "fp8kit.encode(big16, 'float8_e5m2')"),
    "encode, then float64 data": ("fp8kit.encode(big, 'float8_e4m3fn')",
                                  "fp8kit.encode(big64, 'float8_e4m3fn')"),
    "decode": ("fp8kit.decode(codes, 'float8_e4m3fn')", "fp8kit.decode(codes, 'float8_e5m2')"),
    "decode, then to float64": ("fp8kit.decode(codes, 'float8_e4m3fn')",
                                "fp8kit.decode(codes, 'float8_e4m3fn', dtype=np.float64)"),
    "decode to bfloat16": ("fp8kit.decode(codes, 'float8_e4m3fn', dtype=ml_dtypes.bfloat16)",
                           "fp8kit.decode(codes, 'float8_e5m2', dtype=ml_dtypes.bfloat16)"),
    "round_to": ("fp8kit.round_to(big, 'float8_e4m3fn')", "fp8kit.round_to(big, 'float8_e5m2')"),
    "round_to bfloat16, then float16": ("fp8kit.round_to(big16, 'float8_e4m3fn')",
                                        "fp8kit.round_to(bigh, 'float8_e4m3fn')"),
    "astype": ("fp8kit.astype(big, 'float8_e4m3fn')", "fp8kit.astype(big, 'float8_e5m2')"),
    "cast": ("fp8kit.cast(big, 'FLOAT8E4M3FN')", "fp8kit.cast(big, 'FLOAT8E5M2')"),
    "cast bfloat16, then float16": ("fp8kit.cast(big16, 'FLOAT8E4M3FN')",
                                    "fp8kit.cast(bigh, 'FLOAT8E4M3FN')"),
    "cast integer": ("fp8kit.cast(ints, np.int8)", "fp8kit.cast(ints, np.uint8)"),
    "convert_promote_types": ("fp8kit.convert_promote_types(big, ints)",
                              "fp8kit.convert_promote_types(big64, ints)"),
    "pack": ("fp8kit.pack(codes4, 'float4_e2m1fn')", "fp8kit.pack(codes6, 'float6_e2m3fn')"),
    "unpack": ("fp8kit.unpack(packed4, 'float4_e2m1fn', big.size)",
               "fp8kit.unpack(packed4, 'float4_e2m1fn', (1024, 1024))"),
    "fake_convert": ("fp8kit.fake_convert(big, 2.0, destination_type='f8e4m3')",
                     "fp8kit.fake_convert(big, 2.0, destination_type='f8e5m2')"),
    "fake_convert bfloat16, then float16": (
        "fp8kit.fake_convert(big16, np.array(2.0, big16.dtype), destination_type='f8e4m3')",
        "fp8kit.fake_convert(bigh, np.float16(2.0), destination_type='f8e4m3')"),
    "round_to stochastic": (
        "fp8kit.round_to(big, 'float8_e4m3fn', rounding='stochastic', seed=1)",
        "fp8kit.round_to(big, 'float8_e5m2', rounding='stochastic', seed=1)"),
    "round_to stochastic bfloat16, then float64": (
        "fp8kit.round_to(big16, 'float8_e4m3fn', rounding='stochastic', seed=1)",
        "fp8kit.round_to(big64, 'float8_e4m3fn', rounding='stochastic', seed=1)"),
    "encode stochastic": (
        "fp8kit.encode(big, 'float8_e4m3fn', rounding='stochastic', seed=1)",
        "fp8kit.encode(big, 'float8_e5m2', rounding='stochastic', seed=1)"),
    "study.quantize": ("fp8kit.study.quantize(big2d, 'float8_e4m3fn', 'block')",
                       "fp8kit.study.quantize(big2d, 'float8_e5m2', 'block')"),
    "study.quantize per tensor": ("fp8kit.study.quantize(big2d, 'float8_e4m3fn')",
                                  "fp8kit.study.quantize(big2d, 'float8_e5m2')"),
    "study.scale_for": ("fp8kit.study.scale_for(big2d, 'float8_e4m3fn', 'channel')",
                        "fp8kit.study.scale_for(big2d, 'float8_e5m2', 'channel')"),
    "study.mx_scales": ("fp8kit.study.mx_scales(big2d, 'float8_e4m3fn')",
                        "fp8kit.study.mx_scales(big2d, 'float8_e5m2')"),
    "study.error_metrics": ("fp8kit.study.error_metrics(big, big, fmt='float8_e4m3fn')",
                            "fp8kit.study.error_metrics(big64, big64, fmt='float8_e4m3fn')"),
    # the paths the thirteenth pass made native (round_to in place, encode_lean, decode)
    "round_to float64, then float4_e2m1fn": ("fp8kit.round_to(big64, 'float8_e4m3fn')",
                                             "fp8kit.round_to(big64, 'float4_e2m1fn')"),
    "encode float4_e2m1fn, then float8_e3m4": ("fp8kit.encode(big, 'float4_e2m1fn')",
                                               "fp8kit.encode(big, 'float8_e3m4')"),
    "encode to bfloat16, then float16": ("fp8kit.encode(big, 'bfloat16')",
                                         "fp8kit.encode(big, 'float16')"),
    "decode float16 codes, then bfloat16": ("fp8kit.decode(codes16, 'float16')",
                                            "fp8kit.decode(codes16, 'bfloat16')"),
    "study.quantize float64": ("fp8kit.study.quantize(big2d.astype(np.float64), "
                               "'float8_e4m3fn', 'block')",
                               "fp8kit.study.quantize(big2d.astype(np.float64), "
                               "'float8_e5m2', 'block')"),
    # options on Numba-lowered kernels until the fourteenth pass
    "encode toward_zero": ("fp8kit.encode(big, 'float8_e4m3fn', rounding='toward_zero')",
                           "fp8kit.encode(big, 'float8_e5m2', rounding='toward_zero')"),
    "fake_convert mode='openvino'": (
        "fp8kit.fake_convert(big, 2.0, destination_type='f8e4m3', mode='openvino')",
        "fp8kit.fake_convert(big, 2.0, destination_type='f8e5m2', mode='openvino')"),
    "study.sweep 2x3": (
        "fp8kit.study.sweep({'w': big2d}, ['float8_e4m3fn', 'float8_e5m2'], "
        "['tensor', 'channel', 'block:32'])",
        "fp8kit.study.sweep({'w': big2d}, ['float8_e4m3fnuz', 'float8_e5m2fnuz'], "
        "['tensor', 'channel', 'block:32'])"),
    "round_to toward_zero": ("fp8kit.round_to(big, 'float8_e4m3fn', rounding='toward_zero')",
                             "fp8kit.round_to(big, 'float8_e5m2', rounding='toward_zero')"),
    "round_to flush_subnormals": (
        "fp8kit.round_to(big, 'float8_e4m3fn', flush_subnormals=True)",
        "fp8kit.round_to(big, 'float8_e5m2', flush_subnormals=True)"),
    "encode float8_e8m0fnu, then round_to": ("fp8kit.encode(big, 'float8_e8m0fnu')",
                                            "fp8kit.round_to(big, 'float8_e8m0fnu')"),
    "encode p3109_k8p1se": ("fp8kit.encode(big, 'p3109_k8p1se')",
                            "fp8kit.encode(big, 'p3109_k8p1sf')"),
    "fake_convert toward_zero": ("fp8kit.fake_convert(big, 2.0, rounding='toward_zero')",
                                 "fp8kit.fake_convert(big, 2.0, destination_type='f8e5m2', "
                                 "rounding='toward_zero')"),
    "fake_convert stochastic": (
        "fp8kit.fake_convert(big, 2.0, rounding='stochastic', seed=1)",
        "fp8kit.fake_convert(big, 2.0, destination_type='f8e5m2', rounding='stochastic', "
        "seed=1)"),
    "study.quantize stochastic": (
        "fp8kit.study.quantize(big2d, 'float8_e4m3fn', 'block', rounding='stochastic', seed=1)",
        "fp8kit.study.quantize(big2d, 'float8_e5m2', 'block', rounding='stochastic', seed=1)"),
    # the fifteenth pass: Cast's legacy integer conversion native; the fused study kernel
    # one function for every data type
    "cast rules='legacy' to int8, then float64 to int32": (
        "fp8kit.cast(big, np.int8, rules='legacy')",
        "fp8kit.cast(big64, np.int32, rules='legacy')"),
    "round_to stochastic_c, then stochastic_half": (
        "fp8kit.round_to(big, 'float8_e4m3fn', rounding='stochastic_c', seed=1)",
        "fp8kit.round_to(big, 'float8_e4m3fn', rounding='stochastic_half', seed=1)"),
    "study.sweep 2x3, then bfloat16 data": (
        "fp8kit.study.sweep({'w': big2d}, ['float8_e4m3fn', 'float8_e5m2'], "
        "['tensor', 'channel', 'block:32'])",
        "fp8kit.study.sweep({'w': big2d.astype(ml_dtypes.bfloat16)}, "
        "['float8_e4m3fn', 'float8_e5m2'], ['tensor', 'channel', 'block:32'])"),
    # the sixteenth pass: stochastic rounding to bfloat16 and float16 native; P3109's
    # precision-1 and unsigned formats from 16-bit data on 16-bit lanes
    "round_to stochastic bfloat16, then float16": (
        "fp8kit.round_to(big, 'bfloat16', rounding='stochastic', seed=1)",
        "fp8kit.round_to(big, 'float16', rounding='stochastic', seed=1)"),
    "encode float16 -> p3109_k8p1se, then bfloat16 -> p3109_k8p3uf": (
        "fp8kit.encode(big.astype(np.float16), 'p3109_k8p1se')",
        "fp8kit.encode(big.astype(ml_dtypes.bfloat16), 'p3109_k8p3uf')"),
    # the seventeenth pass: the options that still compiled a Numba kernel
    "round_to stochastic flush_subnormals, then float8_e8m0fnu": (
        "fp8kit.round_to(big, 'float8_e4m3fn', rounding='stochastic', seed=1, "
        "flush_subnormals=True)",
        "fp8kit.round_to(big, 'float8_e8m0fnu', rounding='stochastic', seed=1)"),
    "encode p3109_k8p1se toward_zero, then stochastic": (
        "fp8kit.encode(big, 'p3109_k8p1se', rounding='toward_zero')",
        "fp8kit.encode(big, 'p3109_k8p1se', rounding='stochastic', seed=1)"),
    "round_to bfloat16 toward_zero, then bfloat16 data -> float16": (
        "fp8kit.round_to(big, 'bfloat16', rounding='toward_zero')",
        "fp8kit.round_to(big16, 'float16')"),
    "fake_convert one NaN row, then NaN shifts": (
        "fp8kit.fake_convert(big2d, np.where(np.arange(1024)[:, None] == 9, np.nan, 1.5)"
        ".astype(np.float32))",
        "fp8kit.fake_convert(big2d, np.float32(2.0) + np.zeros((1024, 1), np.float32), "
        "np.where(np.arange(1024)[:, None] == 9, np.nan, 0.5).astype(np.float32))"),
    # the eighteenth pass: the unsigned P3109 formats in round_to (encode's kernel, then
    # decode's), the variants to bfloat16/float16, float64 data -> bfloat16 stochastic
    "round_to p3109_k8p1ue, then float64 -> p3109_k8p6ue": (
        "fp8kit.round_to(big, 'p3109_k8p1ue')", "fp8kit.round_to(big64, 'p3109_k8p6ue')"),
    "round_to bfloat16 stochastic_c, then float16 stochastic_half": (
        "fp8kit.round_to(big, 'bfloat16', rounding='stochastic_c', seed=1)",
        "fp8kit.round_to(big, 'float16', rounding='stochastic_half', seed=1)"),
    "round_to stochastic bfloat16, then float64 data": (
        "fp8kit.round_to(big, 'bfloat16', rounding='stochastic', seed=1)",
        "fp8kit.round_to(big64, 'bfloat16', rounding='stochastic', seed=1)"),
    "round_to stochastic float16, then float64 data to float8_e8m0fnu": (
        "fp8kit.round_to(big64, 'float16', rounding='stochastic', seed=1)",
        "fp8kit.round_to(big64, 'float8_e8m0fnu', rounding='stochastic', seed=1)"),
    "round_to float64 stochastic_c to float16, then stochastic_half to p3109_k8p7se": (
        "fp8kit.round_to(big64, 'float16', rounding='stochastic_c', seed=1)",
        "fp8kit.round_to(big64, 'p3109_k8p7se', rounding='stochastic_half', seed=1)"),
    # the twentieth pass: the last stochastic cases on Numba kernels
    "round_to p3109_k8p1ue stochastic, then float64 data stochastic_c": (
        "fp8kit.round_to(big, 'p3109_k8p1ue', rounding='stochastic', seed=1)",
        "fp8kit.round_to(big64, 'p3109_k8p1uf', rounding='stochastic_c', seed=1)"),
    "round_to float64 stochastic_c to bfloat16 (8 bits), then float8_e8m0fnu (23 bits)": (
        "fp8kit.round_to(big64, 'bfloat16', rounding='stochastic_c', seed=1, random_bits=8)",
        "fp8kit.encode(big64, 'float8_e8m0fnu', rounding='stochastic', seed=1, "
        "random_bits=23)"),
    "fake_convert every 7th row NaN, then openvino": (
        "fp8kit.fake_convert(big2d, np.where(np.arange(1024)[:, None] % 7 == 0, np.nan, 1.5)"
        ".astype(np.float32))",
        "fp8kit.fake_convert(big2d, np.where(np.arange(1024)[:, None] % 7 == 0, np.nan, 1.5)"
        ".astype(np.float32), mode='openvino')"),
    # the matrix products: one kernel per model (the fused model's fast kernel first)
    "matmul Hopper wgmma e4m3, then fp32-pairwise": (
        "fp8kit.matmul(a8, b8, instruction=('Hopper', 'wgmma', 'm64n256k32.f32.e4m3.e4m3'))",
        "fp8kit.matmul(a8, b8, instruction='fp32-pairwise')"),
    "matmul CDNA3 fp8, then exact": (
        "fp8kit.matmul(a8z, b8z, instruction=('CDNA3', 'mfma', 'f32_32x32x16_fp8_fp8'))",
        "fp8kit.matmul(a8, b8, instruction='exact')"),
}  # fmt: skip

_COLD_CODE = """
import json, time
import ml_dtypes
import numba
import numpy as np
import fp8kit
big = np.random.default_rng(0).standard_normal(1 << 20, dtype=np.float32)
big64 = big.astype(np.float64)
big2d = big.reshape(1024, 1024)
codes = big.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
big16 = big.astype(ml_dtypes.bfloat16)
bigh = big.astype(np.float16)
ints = (big * 1000).astype(np.int16)
codes4, codes6 = codes & np.uint8(15), codes & np.uint8(63)
packed4 = (codes4[::2] | (codes4[1::2] << np.uint8(4)))
codes16 = bigh.view(np.uint16)
a8 = big[: 64 * 512].reshape(64, 512).astype(ml_dtypes.float8_e4m3fn)
b8 = big[: 512 * 256].reshape(512, 256).astype(ml_dtypes.float8_e4m3fn)
a8z, b8z = a8.astype(ml_dtypes.float8_e4m3fnuz), b8.astype(ml_dtypes.float8_e4m3fnuz)
t0, c0 = time.perf_counter(), time.process_time()
{first}
t1, c1 = time.perf_counter(), time.process_time()
{second}
t2 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1, c1 - c0]))
"""


def cold_times(repeat: int) -> dict[str, list[list[float]]]:
    """Per public function: [first call with an empty cache, another format warm, CPU time
    of the first call] samples (process CPU time: less inflated than wall time by other
    processes on a loaded machine)."""
    out: dict[str, list[list[float]]] = {}
    for name, (first, second) in PUBLIC_COLD.items():
        for _ in range(repeat):
            cache_dir = tempfile.mkdtemp(prefix="fp8kit-compare-numba-")
            try:
                env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
                code = _COLD_CODE.format(first=first, second=second)
                out.setdefault(name, []).append(json.loads(_python(code, env)))
            finally:
                shutil.rmtree(cache_dir, ignore_errors=True)
    return out


def cold_table(cold: dict[str, list[list[float]]]) -> str:
    lines = [
        "| public function (1M float32) | 1st call, empty cache: median s | min s | "
        "CPU s (median) | then another format/dtype: median s |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, samples in cold.items():
        first = [r[0] for r in samples]
        other = [r[1] for r in samples]
        cpu = [r[2] for r in samples]
        lines.append(
            f"| {name} | {statistics.median(first):.3f} | {min(first):.3f} | "
            f"{statistics.median(cpu):.3f} | {statistics.median(other):.3f} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- output


def _fmt_ms(s: float) -> str:
    ms = s * 1e3
    return f"{ms:.4f}" if ms < 0.1 else f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def detail_table(rows: list[Row]) -> str:
    lines = [
        "| case | implementation | median ms | Melem/s | GB/s | time / ref time | same bits |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    ref: dict[str, float] = {}
    for r in rows:
        ref.setdefault(r.case, r.seconds)
        ratio = r.seconds / ref[r.case]
        lines.append(
            f"| {r.case} | {r.impl} | {_fmt_ms(r.seconds)} | {r.melem_s:,.0f} | {r.gb_s:.2f} | "
            f"{ratio:.2f} | {r.same_bits} |"
        )
    return "\n".join(lines)


def summary_table(rows: list[Row]) -> str:
    cases: dict[str, dict[str, Row]] = {}
    for r in rows:
        cases.setdefault(r.case, {})[r.impl] = r
    cols = [c for c in COMPARED if any(c in impls for impls in cases.values())]
    head = "| case | fp8kit ms | " + " | ".join(f"{c} / fp8kit" for c in cols) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(cols)]
    for case, impls in cases.items():
        if FP8KIT not in impls:
            continue
        base = impls[FP8KIT].seconds
        cells = [f"{impls[c].seconds / base:.2f}" if c in impls else "n/a" for c in cols]
        lines.append(f"| {case} | {_fmt_ms(base)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def startup_table(imports: dict[str, list[float]], first: dict[str, list[float]]) -> str:
    lines = [
        "| measurement (fresh process) | median ms | min ms | max ms | samples |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, values in list(imports.items()) + list(first.items()):
        if label.startswith("cache files"):
            continue
        ms = [v * 1e3 for v in values]
        lines.append(
            f"| {label} | {statistics.median(ms):.2f} | {min(ms):.2f} | {max(ms):.2f} | {len(ms)} |"
        )
    return "\n".join(lines)


def _loadavg() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # not available on this platform
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=16_000_000, help="elements (default 16M)")
    parser.add_argument("--repeat", type=int, default=7, help="samples per timing (default 7)")
    parser.add_argument(
        "--threads",
        type=int,
        default=fp8kit.get_num_threads(),
        help="threads for fp8kit and torch (default: fp8kit.get_num_threads())",
    )
    parser.add_argument(
        "--process-repeat",
        type=int,
        default=5,
        help="fresh processes per import / first-call measurement (default 5)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write all results to FILE")
    parser.add_argument(
        "--sections",
        default="codec,limit,startup,cold",
        help="comma-separated: codec, limit (each conversion against a streaming-limit "
        "kernel), more (issue 8's formats), rounding, startup, cold (first call of every "
        "public function, empty cache) (default codec,limit,startup,cold)",
    )
    args = parser.parse_args(argv)
    sections = set(args.sections.split(","))
    if not sections <= {"codec", "limit", "more", "rounding", "startup", "cold"}:
        parser.error(f"unknown section in --sections {args.sections!r}")
    if args.size < 1 or args.repeat < 1 or args.threads < 1 or args.process_repeat < 1:
        parser.error("--size, --repeat, --threads and --process-repeat must be positive")

    fp8kit.set_num_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)

    versions = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "numba": __import__("numba").__version__,
        "torch": torch.__version__ if torch is not None else "not installed",
        "fp8kit": fp8kit.__version__,
    }
    machine = {
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpus_available": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
    }
    print("# fp8kit vs ml_dtypes vs torch\n")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(
        f"machine: {machine['platform']}, {machine['cpus_available']} CPUs available, "
        f"load average at start {_loadavg()}"
    )
    print(
        f"size {args.size:,} elements (small case {SMALL_SIZE:,}), median of {args.repeat} "
        f"samples, fp8kit threads {args.threads}"
        + (f", torch threads {torch.get_num_threads()}" if torch is not None else "")
        + "; ml_dtypes is single-threaded."
    )
    print(
        "Data: standard normal float32 (seed 0). GB/s counts input + output bytes. "
        "ref = first row of each case (fp8kit; in the threads cases fp8kit with 1 thread): "
        "'time / ref time' > 1 means slower than ref. 'same bits': output bit-identical to "
        "ref's.\n"
    )
    sys.stdout.flush()

    t_start = time.perf_counter()
    rows = codec_rows(args.size, args.repeat, args.threads) if "codec" in sections else []
    if "more" in sections:
        rows += more_rows(args.size, args.repeat)
    if "rounding" in sections:
        rows += rounding_rows(args.size, args.repeat)
    if rows:
        print("## Throughput\n")
        print(detail_table(rows))
        print("\n## Ratios (other implementation's time / fp8kit time)\n")
        print(summary_table(rows))
        sys.stdout.flush()
    lim_rows: list[Row] = []
    if "limit" in sections:
        lim_rows = limit_rows(args.size, args.repeat, args.threads)
        print("\n## Distance to the streaming limit\n")
        print(
            "The limit is a trivial kernel with the conversion's memory traffic (read the "
            "input's bits, write the output's: one shift each), threaded like fp8kit's; "
            "both measured side by side.\n"
        )
        print(limit_table(lim_rows))
        sys.stdout.flush()
        rows += lim_rows

    imports: dict[str, list[float]] = {}
    first: dict[str, list[float]] = {}
    if "startup" in sections:
        imports = {
            "import fp8kit": import_times("fp8kit", args.process_repeat),
            "import numpy, ml_dtypes, numba (fp8kit's dependencies)": import_times(
                "numpy, ml_dtypes, numba", args.process_repeat
            ),
        }
        first = first_call_times(args.process_repeat)
        print("\n## Start-up (each sample a fresh interpreter; first calls on 4096 float32)\n")
        print(startup_table(imports, first))
        files = first["cache files written by the cold process"]
        print(
            f"\nEmpty cache = new temporary NUMBA_CACHE_DIR per sample (kernels compiled); warm "
            f"cache = a second process with the same dir ({statistics.median(files):.0f} cache "
            f"files written by the first)."
        )
    cold: dict[str, list[list[float]]] = {}
    if "cold" in sections:
        cold = cold_times(args.process_repeat)
        print("\n## Cold start of every public function (fresh process, empty Numba cache)\n")
        print(cold_table(cold))
        sys.stdout.flush()
    print(
        f"\nTotal run time {time.perf_counter() - t_start:.0f} s; load average at end {_loadavg()}."
    )

    if args.json:
        payload = {
            "versions": versions,
            "machine": machine,
            "args": vars(args),
            "rows": [dict(asdict(r), melem_s=r.melem_s, gb_s=r.gb_s) for r in rows],
            "imports_s": imports,
            "first_call_s": first,
            "cold_s": cold,
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
