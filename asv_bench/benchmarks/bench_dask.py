"""fp8kit.encode on a Dask array (16M float32 in 1M chunks, threaded scheduler; 4M by
default) against the numpy call, and study.sweep on a Dask array against numpy
(benchmarks/compare_dask.py prints the ratios).  Without Dask the rows are n/a."""

import numpy as np

import fp8kit

from ._grid import FULL

N, CHUNK, FMT = (16 if FULL else 4) << 20, 1 << 20, "float8_e4m3fn"
ROWS = 4096 if FULL else 1024


def _dask_array():
    try:
        import dask.array as da
    except ImportError:
        raise NotImplementedError("dask is not installed") from None  # (asv shows n/a)
    return da


class DaskEncode:
    timeout = 300

    def setup(self):
        da = _dask_array()

        self.x = np.random.default_rng(0).standard_normal(N).astype(np.float32) * 100
        self.d = da.from_array(self.x, chunks=CHUNK)
        fp8kit.encode(self.x[:CHUNK], FMT)  # compile outside the timings

    def time_numpy(self):
        fp8kit.encode(self.x, FMT)

    def time_dask_threads(self):
        fp8kit.encode(self.d, FMT).compute(scheduler="threads")

    def time_dask_graph_only(self):
        fp8kit.encode(self.d, FMT)


class DaskStudySweep:
    """study.sweep (2 formats x 3 scalings) of a 4096 x 4096 float32 tensor (1024 x 4096 by
    default): numpy against a Dask array of 512-row chunks on the threaded scheduler."""

    timeout = 300

    def setup(self):
        da = _dask_array()

        from fp8kit import study

        self.w = np.random.default_rng(0).standard_normal((ROWS, 4096)).astype(np.float32)
        self.d = da.from_array(self.w, chunks=(512, 4096))
        study.sweep({"w": self.w[:512]})  # compile outside the timings

    def time_numpy(self):
        from fp8kit import study

        study.sweep({"w": self.w})

    def time_dask_threads(self):
        import dask

        from fp8kit import study

        with dask.config.set(scheduler="threads"):
            study.sweep({"w": self.d})
