"""Quantization-error studies: the sweep of the issue (4 float8 formats x 3 scalings), and
its two passes (amax, metrics) against plain numpy doing the same work in float64.

``setup`` runs each operation once, so JIT compilation is not timed.  numpy's amax is
``np.abs(x).max(...)`` (it does not leave NaN/Inf out, fp8kit's does); numpy's metrics are
the float64 expressions the tests use as their oracle.
"""

import numpy as np

import fp8kit
from fp8kit import study
from fp8kit.study.metrics import metrics_of
from fp8kit.study.scaling import group_amax

from ._grid import pick

SEED = 20240601
FORMATS = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
SCALINGS = ["tensor", "channel", "block:32"]
SIZES = pick([1_048_576], [1_048_576, 16_777_216])


def _data(size):
    rows = 1024 if size >= 1024 * 1024 else 32
    x = np.random.default_rng(SEED).standard_normal(size, dtype=np.float32)
    return x.reshape(rows, size // rows)


class Sweep:
    """study.sweep over 4 formats x 3 scalings (12 quantize + 12 metrics passes, 3 amax)."""

    params = [SIZES]
    param_names = ["size"]
    timeout = 300

    def setup(self, size):
        self.x = _data(size)
        study.sweep(self.x, FORMATS, SCALINGS)

    def time_sweep(self, size):
        study.sweep(self.x, FORMATS, SCALINGS)


def _numpy_metrics(x, q, scale, fmt):
    x64, q64 = x.astype(np.float64), q.astype(np.float64)
    ok = np.isfinite(x64) & np.isfinite(q64)
    e = np.where(ok, q64 - x64, 0.0)
    xs = np.where(ok, x64, 0.0)
    ax = np.abs(xs)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(ax != 0, np.abs(e) / ax, 0.0)
    return (
        np.sum(e * e), np.sum(xs * xs), np.abs(e).max(), rel.max(),
        np.count_nonzero((ax != 0) & (q64 == 0)), np.count_nonzero(ax * scale > fmt.max),
        np.count_nonzero((q64 != 0) & (np.abs(q64) * scale < fmt.smallest_normal)),
    )  # fmt: skip


class Metrics:
    """One error-metrics pass over data and its float8_e4m3fn quantization."""

    params = [["fp8kit", "numpy"], SIZES]
    param_names = ["implementation", "size"]
    timeout = 300

    def setup(self, implementation, size):
        self.x = _data(size)
        self.fmt = fp8kit.get_format("float8_e4m3fn")
        self.scale = study.scale_for(self.x, self.fmt)
        self.q = study.quantize(self.x, self.fmt, scale=self.scale)
        s64 = np.asarray(self.scale, np.float64)
        if implementation == "fp8kit":
            self.run = lambda: metrics_of(self.x, self.q, s64, self.fmt)
        else:
            self.run = lambda: _numpy_metrics(self.x, self.q, float(s64), self.fmt)
        self.run()

    def time_error_metrics(self, implementation, size):
        self.run()


class ByFormat:
    """sweep and quantize of one format and scaling: fp4 and fp6 take float8's fused
    kernels, so their times should be float8_e4m3fn's (they were 4-6x, in numpy steps)."""

    params = [
        pick(["float8_e4m3fn", "float4_e2m1fn", "float6_e2m3fn"],
             ["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn",
              "p3109_k6p3se"]),
        pick(["tensor", "block:32"], ["none", "tensor", "channel", "block:32"]),
    ]  # fmt: skip
    param_names = ["format", "scaling"]
    timeout = 300

    def setup(self, fmt, scaling):
        self.x = _data(1_048_576)
        self.kind = scaling.split(":")[0]
        study.sweep(self.x, [fmt], [scaling])
        study.quantize(self.x, fmt, self.kind)

    def time_sweep(self, fmt, scaling):
        study.sweep(self.x, [fmt], [scaling])

    def time_quantize(self, fmt, scaling):
        study.quantize(self.x, fmt, self.kind)


class Amax:
    """Largest |x| per tensor, per row (channel axis 0) and per MX block of 32 (last axis)."""

    params = [["fp8kit", "numpy"], ["tensor", "channel", "block:32"], SIZES]
    param_names = ["implementation", "grouping", "size"]
    timeout = 300

    def setup(self, implementation, grouping, size):
        x = _data(size)
        kind = grouping.split(":")[0]
        axis, block = (0, 1) if kind != "block" else (1, 32)
        if implementation == "fp8kit":
            self.run = lambda: group_amax(x, kind, axis, block)
        elif kind == "tensor":
            self.run = lambda: np.abs(x).max()
        elif kind == "channel":
            self.run = lambda: np.abs(x).max(axis=1, keepdims=True)
        else:
            self.run = lambda: np.abs(x.reshape(x.shape[0], -1, 32)).max(axis=2)
        self.run()

    def time_amax(self, implementation, grouping, size):
        self.run()
