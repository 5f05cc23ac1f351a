"""fp8kit.encode on a Dask array (16M float32 in 1M chunks, threaded scheduler) against the
numpy call (benchmarks/compare_dask.py prints the ratio)."""

import numpy as np

import fp8kit

N, CHUNK, FMT = 16 << 20, 1 << 20, "float8_e4m3fn"


class DaskEncode:
    timeout = 300

    def setup(self):
        import dask.array as da

        self.x = np.random.default_rng(0).standard_normal(N).astype(np.float32) * 100
        self.d = da.from_array(self.x, chunks=CHUNK)
        fp8kit.encode(self.x[:CHUNK], FMT)  # compile outside the timings

    def time_numpy(self):
        fp8kit.encode(self.x, FMT)

    def time_dask_threads(self):
        fp8kit.encode(self.d, FMT).compute(scheduler="threads")

    def time_dask_graph_only(self):
        fp8kit.encode(self.d, FMT)
