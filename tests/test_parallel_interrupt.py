"""Threads, interrupts and memory (issue 45): an interrupted call cancels its pending chunks
and waits for the running ones before the exception reaches the caller (so ``out=`` is
quiet from then on); the thread count is capped; a result is allocated once; a code changed
by another thread is a ValueError; the study takes ``requires_grad`` tensors."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import fp8kit
from fp8kit import _parallel, codec

ROOT = Path(__file__).resolve().parent.parent
SIZE = _parallel.PARALLEL_THRESHOLD * 4  # (threaded: at least two chunks)

needs_two_threads = pytest.mark.skipif(
    _parallel.max_threads() < 2, reason="needs two threads (NUMBA_NUM_THREADS >= 2)"
)
in_main_thread = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signals reach the main thread only",
)


def python(code: str, env: dict | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def _first(spec: int) -> int:
    return (spec >> 20) & 0xFFFFF  # (see _parallel.chunk_spec)


def _ctrl_c_after(seconds: float) -> threading.Timer:
    """SIGINT to the main thread after ``seconds``, as a terminal's Ctrl-C."""
    main = threading.main_thread().ident
    timer = threading.Timer(seconds, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    return timer


@pytest.fixture
def sigint_raises():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@needs_two_threads
@in_main_thread
def test_interrupt_waits_for_running_chunks(sigint_raises):
    """Ctrl-C while the caller waits for the pool's chunk: the chunk running on the pool
    has finished writing when the KeyboardInterrupt arrives (before the fix the wait was
    cut short and the chunk wrote on after the exception)."""
    out = np.zeros(40, np.int64)

    def kernel(out, spec):
        if _first(spec) == 0:
            return None  # the caller's own chunk: done at once
        for i in range(out.size):  # the pool's chunk: 0.4 s
            time.sleep(0.01)
            out[i] = 1
        return None

    timer = _ctrl_c_after(0.1)
    with fp8kit.num_threads(2), pytest.raises(KeyboardInterrupt):
        _parallel.launch_compiled(kernel, SIZE, out)
    timer.join()
    seen = out.copy()
    time.sleep(0.1)
    assert seen.all() and np.array_equal(seen, out)


@needs_two_threads
@in_main_thread
def test_interrupt_cancels_pending_chunks(sigint_raises):
    """Chunks queued behind other work when Ctrl-C arrives never run."""
    pool = _parallel._get_pool()
    release = threading.Event()
    blockers = [pool.submit(release.wait) for _ in range(pool._max_workers)]
    out = np.zeros(2, np.int64)

    def kernel(out, spec):
        out[0 if _first(spec) == 0 else 1] = 1
        return None

    timer = _ctrl_c_after(0.1)
    try:
        with fp8kit.num_threads(2), pytest.raises(KeyboardInterrupt):
            _parallel.launch_compiled(kernel, SIZE, out)
    finally:
        release.set()
        timer.join()
        for b in blockers:
            b.result()
    time.sleep(0.1)
    assert out.tolist() == [1, 0]  # the caller's chunk ran, the queued one was cancelled


@needs_two_threads
def test_failed_chunk_waits_for_the_others():
    """A chunk that raises: the others have finished when the error arrives."""
    out = np.zeros(20, np.int64)

    def kernel(out, spec):
        if _first(spec) == 0:
            time.sleep(0.05)  # (the pool's chunk is running by then)
            raise RuntimeError("caller's chunk failed")
        for i in range(out.size):
            time.sleep(0.01)
            out[i] = 1
        return None

    with fp8kit.num_threads(2), pytest.raises(RuntimeError, match="caller's chunk failed"):
        _parallel.launch_compiled(kernel, SIZE, out)
    assert out.all()


def test_thread_count_from_the_environment_is_capped():
    """FP8KIT_NUM_THREADS=100000 splits the work into more chunks, not more threads (before
    the fix: 88 Python threads)."""
    res = python(
        """
        import threading, numpy as np, fp8kit
        from fp8kit import _parallel
        x = np.random.default_rng(0).standard_normal(1 << 22).astype(np.float32)
        assert fp8kit.get_num_threads() == 100000
        got = fp8kit.encode(x, "float8_e4m3fn")
        with fp8kit.num_threads(1):
            assert np.array_equal(got, fp8kit.encode(x, "float8_e4m3fn"))
        n = sum(t.name.startswith("fp8kit") for t in threading.enumerate())
        print(n, _parallel.max_threads())
        """,
        env={"FP8KIT_NUM_THREADS": "100000"},
    )
    assert res.returncode == 0, res.stderr
    pool_threads, cap = map(int, res.stdout.split())
    assert pool_threads <= max(1, cap - 1)


# ------------------------------------------------------------------ one allocation per result
@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda x: fp8kit.encode(x, "float8_e4m3fn"), id="encode-f8"),
        pytest.param(lambda x: fp8kit.encode(x, "bfloat16"), id="encode-bf16"),
        pytest.param(lambda x: fp8kit.round_to(x, "float8_e4m3fn"), id="round_to-f8"),
        pytest.param(lambda x: fp8kit.round_to(x, "bfloat16"), id="round_to-bf16"),
        pytest.param("decode", id="decode"),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_result_is_allocated_once(call, dtype):
    """The fast paths allocated a result for the small-array kernel, dropped it for large
    arrays and allocated a second (peak 2x the result)."""
    x = np.random.default_rng(0).standard_normal(1 << 21).astype(dtype)
    if call == "decode":
        x = fp8kit.encode(x, "float8_e5m2")

        def call(codes):
            return fp8kit.decode(codes, "float8_e5m2", dtype=dtype)

    for _ in range(2):  # (the first call records the fast path; the second takes it)
        call(x)
    tracemalloc.start()
    try:
        res = call(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 1.05 * res.nbytes + (1 << 16), (peak, res.nbytes)


def test_result_fits_an_address_space_limit_of_one_result():
    """Under RLIMIT_AS with room for one result and a half, round_to and encode succeed
    (a second allocation of the result raised MemoryError)."""
    res = python(
        """
        import resource, numpy as np, fp8kit

        def vm():
            for line in open("/proc/self/status"):
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024

        x = np.ones(1 << 25, np.float32)  # 128 MiB
        for _ in range(2):  # kernels loaded, fast paths recorded, pool threads started
            del_me = fp8kit.round_to(x, "float8_e4m3fn"), fp8kit.encode(x, "bfloat16")
            del del_me
        limit = vm() + int(1.5 * x.nbytes)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
        y = fp8kit.round_to(x, "float8_e4m3fn")
        assert y.nbytes == x.nbytes and y[0] == 1.0
        del y
        z = fp8kit.encode(x, "bfloat16")
        assert z.nbytes == x.nbytes // 2
        print("ok")
        """
    )
    if "VmSize" in res.stderr or not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc/self/status")
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


# ------------------------------------------------------------------ codes changed meanwhile
class _Flicker(np.ndarray):
    """Codes whose max() sees a bad code that a second look no longer finds, as when
    another thread writes the array between the two reads."""

    def max(self, *args, **kwargs):
        return np.uint16(300)


def test_code_changed_during_the_check_is_a_value_error():
    codes = np.array([1, 2, 3], np.uint16).view(_Flicker)
    with pytest.raises(ValueError, match="changed while being read"):
        codes_check(codes)


def codes_check(codes):
    codec._check_codes(codes, fp8kit.get_format("float8_e4m3fn"))


def test_codes_written_by_another_thread_give_value_errors_only():
    """decode of int16 codes while another thread flips one between valid and not: every
    call returns or raises ValueError (an IndexError escaped before the fix)."""
    codes = np.full(1 << 16, 5, np.int16)
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            codes[-1] = 300
            codes[-1] = 5

    t = threading.Thread(target=flip)
    t.start()
    errors = set()
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                fp8kit.decode(codes, "float8_e4m3fn")
            except ValueError:
                errors.add(ValueError)
            except Exception as exc:  # noqa: BLE001  (the failure this test looks for)
                errors.add(type(exc))
    finally:
        stop.set()
        t.join()
    assert errors <= {ValueError}


# ------------------------------------------------------------------ torch autograd tensors
def test_study_accepts_requires_grad_tensors():
    torch = pytest.importorskip("torch")
    from fp8kit import study

    t = torch.randn(16, 64, requires_grad=True, generator=torch.Generator().manual_seed(0))
    x = t.detach().numpy()
    assert np.array_equal(study.quantize(t, "float8_e4m3fn"), study.quantize(x, "float8_e4m3fn"))
    got = study.sweep({"w": t}, ["float8_e4m3fn"], ["tensor", "block:32"])
    want = study.sweep({"w": x}, ["float8_e4m3fn"], ["tensor", "block:32"])
    assert [r.metrics for r in got] == [r.metrics for r in want]
    assert study.error_metrics(t, x, fmt="float8_e4m3fn").rmse == 0.0
