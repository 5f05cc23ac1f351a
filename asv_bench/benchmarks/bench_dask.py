"""fp8kit.encode on a Dask array (16M float32 in 1M chunks, threaded scheduler) against the
numpy call, and study.sweep on a Dask array against numpy (benchmarks/compare_dask.py prints
the ratios)."""

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


class DaskStudySweep:
    """study.sweep (2 formats x 3 scalings) of a 4096 x 4096 float32 tensor: numpy against
    a Dask array of 512-row chunks on the threaded scheduler."""

    timeout = 300

    def setup(self):
        import dask.array as da

        from fp8kit import study

        self.w = np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32)
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
