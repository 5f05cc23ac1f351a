"""Matrix products as tensor cores compute them: fp8kit.scaled_mm and the chained Hopper
wgmma model beside numpy's float32 ``a @ b`` of the same shape, and mmaemu / mmasim (the
exact references) where installed: their rows are n/a without them.

``setup`` calls each once, so compilation is not timed.
"""

import warnings

import ml_dtypes
import numpy as np

import fp8kit

E4 = ml_dtypes.float8_e4m3fn


def _data(m, k, n):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-4, 4, (m, k)))).astype(E4)
    b = (rng.standard_normal((k, n)) * np.exp2(rng.integers(-4, 4, (k, n)))).astype(E4)
    return a, b


class ScaledMM:
    """64 x 512 x 2048 (M x N x K) e4m3 scaled_mm, fast and slow accumulation."""

    params = [["fp8kit", "mmaemu", "numpy_float32"], [True, False]]
    param_names = ["implementation", "use_fast_accum"]
    timeout = 300

    def setup(self, implementation, fast):
        a, b = _data(64, 2048, 512)
        if implementation == "fp8kit":
            self.run = lambda: fp8kit.scaled_mm(
                a, b, 1.0, 1.0, out_dtype=np.float32, use_fast_accum=fast
            )
        elif implementation == "numpy_float32":
            a32, b32 = a.astype(np.float32), b.astype(np.float32)
            self.run = lambda: a32 @ b32
        else:
            try:
                import mmaemu
                import torch
            except ImportError:
                raise NotImplementedError from None  # (asv shows n/a)
            ta = torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn)
            tb = torch.from_numpy(np.ascontiguousarray(b.T).view(np.uint8))
            tb = tb.view(torch.float8_e4m3fn).t()
            one = torch.tensor(1.0)

            def run():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    mmaemu.scaled_mm(
                        ta, tb, one, one, out_dtype=torch.float32, use_fast_accum=fast,
                        profile="hopper",
                    )  # fmt: skip

            self.run = run
        self.run()

    def time_scaled_mm(self, implementation, fast):
        self.run()


class WgmmaChain:
    """The Hopper wgmma e4m3 model chained over K = 4096 (64 x 256 outputs), and mmasim's
    WGMMA on one m64n256k32 tile; compare per multiply-add (track_macs_per_second)."""

    params = [["fp8kit", "mmasim_one_tile"]]
    param_names = ["implementation"]
    timeout = 300

    def setup(self, implementation):
        a, b = _data(64, 4096, 256)
        if implementation == "fp8kit":
            inst = fp8kit.mma.instruction("Hopper", "wgmma", "m64n256k32.f32.e4m3.e4m3")
            self.run = lambda: fp8kit.matmul(a, b, instruction=inst)
            self.macs = 64 * 256 * 4096
        else:
            try:
                import torch
                from mmasim.nv_ptx import WGMMA
            except ImportError:
                raise NotImplementedError from None
            w = WGMMA("Hopper", "m64n256k32.f32.e4m3.e4m3")
            ta = torch.from_numpy(a[:, :32].copy().view(np.uint8)).view(torch.float8_e4m3fn)
            tb = torch.from_numpy(b[:32].copy().view(np.uint8)).view(torch.float8_e4m3fn)
            tc = torch.zeros(64, 256)
            self.run = lambda: w(ta, tb, tc)
            self.macs = 64 * 256 * 32
        self.run()

    def time_chain(self, implementation):
        self.run()

    def track_macs_per_second(self, implementation):
        import time

        t = time.perf_counter()
        self.run()
        return self.macs / (time.perf_counter() - t)

    track_macs_per_second.unit = "multiply-adds/s"
