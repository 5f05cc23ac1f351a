"""The thread pool under concurrent calls with different thread counts (issue 45): one pool,
never shut down while another thread may submit to it, no more threads than Numba's count."""

import threading

import numpy as np

import fp8kit
from fp8kit import _parallel


def _fp8kit_threads() -> int:
    # (the pool's threads, "fp8kit_<n>"; not the LLVM workers' of kernel compiles,
    # "fp8kit-llvm-...", which never run kernels)
    return sum(t.name.startswith("fp8kit_") for t in threading.enumerate())


def test_mixed_thread_counts_from_many_threads():
    """Threads each using their own thread count call the codec at once: before the fix a
    thread asking for more workers replaced the pool while others submitted to it
    (RuntimeError: cannot schedule new futures after shutdown)."""
    x = np.random.default_rng(0).standard_normal(1 << 19).astype(np.float32)
    want = fp8kit.encode(x, "float8_e4m3fn")
    errors, results = [], []

    def worker(n):
        try:
            with fp8kit.num_threads(n):
                for _ in range(30):
                    results.append(np.array_equal(fp8kit.encode(x, "float8_e4m3fn"), want))
        except Exception as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in (1, 2, 3, 5, 8, 64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 6 * 30 and all(results)


def test_thread_count_is_capped_at_numbas():
    """More threads than Numba's count split the work into more chunks without adding
    threads (set_num_threads' promise): the pool's threads stay below it."""
    x = np.random.default_rng(1).standard_normal(1 << 22).astype(np.float32)
    with fp8kit.num_threads(100_000):
        got = fp8kit.encode(x, "float8_e5m2")
    assert np.array_equal(got, fp8kit.encode(x, "float8_e5m2"))
    assert _fp8kit_threads() <= max(1, _parallel.max_threads() - 1)
    assert _parallel._pool is _parallel._get_pool()  # (one pool, kept)
