"""Encode/decode/round_to speed: fp8kit against ml_dtypes and torch.

Every ``setup`` builds seeded standard-normal float32 data, preallocates the outputs and
calls the operation once, so neither JIT compilation nor output allocation is timed
(except for ``ml_dtypes``, which is ``x.astype(dtype)`` and allocates by definition;
``ml_dtypes_copyto`` is the same cast written into a preallocated array with np.copyto).
Combinations that cannot run (torch missing, format without a torch dtype) raise
NotImplementedError in setup, which asv reports as skipped.
"""

import os
import time

import ml_dtypes
import numpy as np

import fp8kit

from ._grid import BIG, SIZES, pick

#: torch, imported by the torch rows only (asv starts a process per row, and importing
#: torch costs each of them a second or two); None until then
torch = None

SEED = 20240601
FLOAT8_FORMATS = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
#: an IEEE P3109 format (issue 20): fp8kit only (no ml_dtypes or torch dtype); the same
#: compiled kernels as the float8 formats, its constants read at run time
P3109_FORMAT = "p3109_k8p4se"
FORMATS = pick(["float8_e4m3fn", "bfloat16"], FLOAT8_FORMATS + ["bfloat16", P3109_FORMAT])
LIBRARIES = ["fp8kit", "ml_dtypes", "ml_dtypes_copyto", "torch"]


def _cpus():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


THREADS = sorted({1, 2, _cpus()})


def _data(size, dtype=np.float32):
    x = np.random.default_rng(SEED).standard_normal(size, dtype=np.float32)
    return x.astype(dtype, copy=False)


def _ml_dtype(fmt):
    dt = getattr(ml_dtypes, fmt, None)
    if dt is None:
        raise NotImplementedError(f"ml_dtypes has no dtype {fmt}")
    return np.dtype(dt)


def _bits_dtype(fmt):
    return np.dtype(np.uint8) if _ml_dtype(fmt).itemsize == 1 else np.dtype(np.uint16)


def _torch_dtype(fmt):
    global torch
    if torch is None:
        try:
            import torch
        except ImportError:  # torch is optional: its rows are n/a
            raise NotImplementedError("torch is not installed") from None
    dt = getattr(torch, fmt, None)
    if not isinstance(dt, torch.dtype):
        raise NotImplementedError(f"torch has no dtype {fmt}")
    # Same thread count for torch's intra-op pool as fp8kit uses for large arrays.
    torch.set_num_threads(fp8kit.get_num_threads())
    return dt


def _torch_codes(codes, fmt):
    """A torch tensor of the format's dtype sharing memory with uint8/uint16 codes."""
    tdt = _torch_dtype(fmt)
    signed = codes.view(np.int8 if codes.itemsize == 1 else np.int16)
    return torch.from_numpy(signed).view(tdt)


def _encoder(library, fmt, x):
    """A zero-argument callable converting float array x to fmt, output preallocated."""
    if library == "fp8kit":
        out = np.empty(x.shape, fp8kit.get_format(fmt).code_dtype)
        return lambda: fp8kit.encode(x, fmt, out=out)
    if library == "ml_dtypes":
        dt = _ml_dtype(fmt)
        return lambda: x.astype(dt)
    if library == "ml_dtypes_copyto":
        out = np.empty(x.shape, _ml_dtype(fmt))
        return lambda: np.copyto(out, x, casting="unsafe")
    if library == "torch":
        t_out = torch.empty(x.shape, dtype=_torch_dtype(fmt))
        t_x = torch.from_numpy(x)
        return lambda: t_out.copy_(t_x)
    raise ValueError(library)


def _decoder(library, fmt, codes):
    """A zero-argument callable decoding uint8/uint16 codes of fmt into float32."""
    if library == "fp8kit":
        out = np.empty(codes.shape, np.float32)
        return lambda: fp8kit.decode(codes, fmt, out=out)
    if library == "ml_dtypes":
        view = codes.view(_ml_dtype(fmt))
        return lambda: view.astype(np.float32)
    if library == "ml_dtypes_copyto":
        view = codes.view(_ml_dtype(fmt))
        out = np.empty(codes.shape, np.float32)
        return lambda: np.copyto(out, view, casting="unsafe")
    if library == "torch":
        t_codes = _torch_codes(codes, fmt)
        t_out = torch.empty(codes.shape, dtype=torch.float32)
        return lambda: t_out.copy_(t_codes)
    raise ValueError(library)


def _codes(fmt, size):
    if not hasattr(ml_dtypes, fmt):
        return np.ascontiguousarray(fp8kit.encode(_data(size), fmt))
    return np.ascontiguousarray(_data(size).astype(_ml_dtype(fmt)).view(_bits_dtype(fmt)))


class Encode:
    """float32 -> float8 / bfloat16 codes."""

    params = [LIBRARIES, FORMATS, SIZES]
    param_names = ["library", "format", "size"]

    def setup(self, library, fmt, size):
        if library == "torch":
            _torch_dtype(fmt)
        self.run = _encoder(library, fmt, _data(size))
        self.run()  # compile (fp8kit) and fault in the output pages

    def time_encode(self, library, fmt, size):
        self.run()


class EncodeFloat64:
    """float64 -> float8 / bfloat16 codes (fp8kit rounds once, from the exact float64)."""

    params = [LIBRARIES, pick(["float8_e4m3fn"], ["float8_e4m3fn", "float8_e5m2", "bfloat16"]),
              SIZES]  # fmt: skip
    param_names = ["library", "format", "size"]

    def setup(self, library, fmt, size):
        if library == "torch":
            _torch_dtype(fmt)
        self.run = _encoder(library, fmt, _data(size, np.float64))
        self.run()

    def time_encode_float64(self, library, fmt, size):
        self.run()


class Encode16:
    """bfloat16 / float16 -> float8 codes (fp8kit: on byte lanes where the CPU has
    AVX512-VBMI, issue 16; torch converts a bfloat16/float16 tensor to float8 directly)."""

    params = [LIBRARIES, pick(["bfloat16"], ["bfloat16", "float16"]),
              pick(["float8_e4m3fn"], ["float8_e4m3fn", "float8_e5m2"]), SIZES]  # fmt: skip
    param_names = ["library", "source", "format", "size"]

    def setup(self, library, source, fmt, size):
        if library == "torch":
            _torch_dtype(fmt)
        dt = ml_dtypes.bfloat16 if source == "bfloat16" else np.float16
        x = _data(size, dt)
        if library == "torch":
            t_out = torch.empty(x.shape, dtype=_torch_dtype(fmt))
            t_x = torch.from_numpy(x.view(np.int16)).view(_torch_dtype(source))
            self.run = lambda: t_out.copy_(t_x)
        else:
            self.run = _encoder(library, fmt, x)
        self.run()

    def time_encode16(self, library, source, fmt, size):
        self.run()


class Decode:
    """float8 / bfloat16 codes -> float32."""

    params = [LIBRARIES, FORMATS, SIZES]
    param_names = ["library", "format", "size"]

    def setup(self, library, fmt, size):
        if library == "torch":
            _torch_dtype(fmt)
        self.run = _decoder(library, fmt, _codes(fmt, size))
        self.run()

    def time_decode(self, library, fmt, size):
        self.run()


class DecodeTo:
    """float8_e4m3fn codes -> float64, bfloat16, float16 (fp8kit with out=, ml_dtypes'
    astype)."""

    params = [["fp8kit", "ml_dtypes"], pick(["float64"], ["float64", "bfloat16", "float16"]),
              SIZES]  # fmt: skip
    param_names = ["library", "dtype", "size"]
    fmt = "float8_e4m3fn"

    def setup(self, library, dtype, size):
        dt = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
        codes = _codes(self.fmt, size)
        if library == "fp8kit":
            out = np.empty(codes.shape, dt)
            self.run = lambda: fp8kit.decode(codes, self.fmt, out=out)
        else:
            view = codes.view(_ml_dtype(self.fmt))
            self.run = lambda: view.astype(dt)
        self.run()

    def time_decode_to(self, library, dtype, size):
        self.run()


class RoundToModes:
    """fp8kit.round_to float32 -> float8_e4m3fn values in the directed and stochastic
    modes (nearest-even: :class:`RoundTo`)."""

    params = [["toward_zero", "stochastic"], SIZES]
    param_names = ["rounding", "size"]

    def setup(self, rounding, size):
        self.x = _data(size)
        self.out = np.empty_like(self.x)
        self.kw = {"rounding": rounding, "seed": 1 if rounding == "stochastic" else None}
        fp8kit.round_to(self.x, "float8_e4m3fn", out=self.out, **self.kw)

    def time_round_to_mode(self, rounding, size):
        fp8kit.round_to(self.x, "float8_e4m3fn", out=self.out, **self.kw)


class RoundTo:
    """fp8kit.round_to: float32 -> nearest value of the format, kept as float32."""

    params = [FORMATS, SIZES]
    param_names = ["format", "size"]

    def setup(self, fmt, size):
        self.x = _data(size)
        self.out = np.empty_like(self.x)
        fp8kit.round_to(self.x, fmt, out=self.out)

    def time_round_to(self, fmt, size):
        fp8kit.round_to(self.x, fmt, out=self.out)


class Threads:
    """fp8kit on 16M elements (4M by default) with 1 thread vs more (float8_e4m3fn)."""

    params = [["encode", "decode"], THREADS]
    param_names = ["op", "threads"]
    fmt = "float8_e4m3fn"
    size = BIG

    def setup(self, op, threads):
        if op == "encode":
            self.run = _encoder("fp8kit", self.fmt, _data(self.size))
        else:
            self.run = _decoder("fp8kit", self.fmt, _codes(self.fmt, self.size))
        with fp8kit.num_threads(threads):
            self.run()

    def time_threads(self, op, threads):
        with fp8kit.num_threads(threads):
            self.run()


class TrackThroughput:
    """Elements per second on 16M elements (4M by default): median of 5 timed calls after a
    warm-up call."""

    params = [LIBRARIES, ["encode", "decode"], FORMATS]
    param_names = ["library", "op", "format"]
    unit = "elements/s"
    size = BIG
    repeat_calls = 5

    def setup(self, library, op, fmt):
        if library == "torch":
            _torch_dtype(fmt)
        if op == "encode":
            self.run = _encoder(library, fmt, _data(self.size))
        else:
            self.run = _decoder(library, fmt, _codes(fmt, self.size))
        self.run()

    def track_throughput(self, library, op, fmt):
        times = []
        for _ in range(self.repeat_calls):
            t0 = time.perf_counter()
            self.run()
            times.append(time.perf_counter() - t0)
        return self.size / float(np.median(times))
