"""LLVM's part of a kernel's compile on a worker thread (``native._address``): the machine
code it generates is the code that runs, compiles started ahead are the ones later asked
for, a compile a call waits for goes first, and where the worker fails the kernel is
compiled by Numba's own route."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import fp8kit
from fp8kit._kernels import codec as kc
from fp8kit._kernels import native
from fp8kit.formats import get_format

F32 = np.dtype(np.float32)
E4M3 = get_format("float8_e4m3fn")


@pytest.fixture
def anew(monkeypatch):
    """Kernels compiled through fp8kit's native route as if for the first time: nothing read
    from or written to the disk cache, nothing reused from this process (skips where the
    route is not available here)."""
    monkeypatch.setattr(native, "_BUILT", {})
    monkeypatch.setattr(native, "_AHEAD", {})
    monkeypatch.setattr(native, "_load", lambda *a: None)
    monkeypatch.setattr(native, "_store", lambda *a: None)
    if not native.numba_route() or not kc._JIT["cache"]:
        pytest.skip("this interpreter's array layout is not the one the entry reads")


def _encode_kernel():
    import copy

    kernel = copy.copy(kc.encode_kernel(E4M3, F32, True, strategy="generic")[0])
    kernel._built = None  # (the cached one may be built: this one compiles)
    return kernel


def _codes(kernel) -> np.ndarray:
    x = np.linspace(-500, 500, 4099, dtype=np.float32)
    out = np.zeros(x.size, np.uint8)
    kernel.build()(x.view(np.uint32), fp8kit.codec._lut_for(0), kc.dummy(np.uint8), out, 1)
    return out


def _want() -> np.ndarray:
    import ml_dtypes

    x = np.linspace(-500, 500, 4099, dtype=np.float32)
    return np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def test_the_workers_machine_code_is_the_code_that_runs(anew, monkeypatch):
    """The object code the worker emits is loaded as a cache entry is: Numba's JIT takes it
    from the library's object cache and generates none itself (its compiled-object hook,
    which only its own code generation calls, never ran), and it gives the right codes."""
    emitted = []
    plain = native._machine_code

    def machine_code(job):
        code = plain(job)
        emitted.append((job, code, threading.current_thread().name))
        return code

    monkeypatch.setattr(native, "_machine_code", machine_code)
    kernel = _encode_kernel()
    assert np.array_equal(_codes(kernel), _want())
    ((job, code, thread),) = [e for e in emitted if e[1] is not None and "adapter" in e[0].symbol]
    assert thread.startswith("fp8kit-llvm-now")
    library = job.library
    assert library._finalized and not library._compiled  # (the JIT generated nothing)
    assert isinstance(code, bytes) and code and library._compiled_object == code


def test_a_compile_started_ahead_is_the_one_built(anew, monkeypatch):
    """``prefetch`` runs the front end at once and leaves the machine code to the worker;
    the first build takes that compile (one front end, one compile event) and waits for
    it."""
    from numba.core import event

    fronts = []
    plain = native._compile_numba

    def compile_numba(*args):
        fronts.append(args[0][0].__qualname__)
        return plain(*args)

    monkeypatch.setattr(native, "_compile_numba", compile_numba)
    kernel = _encode_kernel()
    with event.install_recorder(native.COMPILE_EVENT) as rec:
        kernel.prefetch()
        assert len(fronts) == 1 and kernel._built is None
        (key,) = [k for k in native._AHEAD if k[0] == "numba"]
        job = native._AHEAD[key]
        assert np.array_equal(_codes(kernel), _want())
    assert len(fronts) == 1 and key not in native._AHEAD and key in native._BUILT
    assert len(rec.buffer) == 2  # (one compile: its start and end)
    assert not job.ahead and job.library._finalized
    kernel.prefetch()  # (built: nothing more)
    assert len(fronts) == 1


def test_a_compile_started_in_another_process_is_compiled_again(anew):
    """A fork's child does not wait for a worker thread it does not have: a compile
    started ahead in another process is compiled again."""
    kernel = _encode_kernel()
    kernel.prefetch()
    (key,) = [k for k in native._AHEAD if k[0] == "numba"]
    stale = native._AHEAD[key]
    stale.code.result()
    stale.pid = -1
    assert np.array_equal(_codes(kernel), _want())
    assert native._BUILT[key][0] is not stale.library


def test_a_compile_a_call_waits_for_goes_first():
    """Between its steps a compile started ahead waits while one a call waits for is on;
    once asked for itself it waits for nothing (and never more than a second)."""
    urgent = native._Urgent()
    job = native._Job(None, "f", "f", None, ahead=True)
    urgent.started()
    passed = threading.Event()

    def step():
        urgent.wait_turn(job)
        passed.set()

    t = threading.Thread(target=step)
    t.start()
    assert not passed.wait(0.1)  # (held back)
    urgent.done()
    assert passed.wait(5)
    t.join()
    passed.clear()
    urgent.started()
    t = threading.Thread(target=step)
    t.start()
    assert not passed.wait(0.1)  # (held back again)
    urgent.claim(job)  # (asked for: it waits no more, woken at once)
    assert passed.wait(0.5)
    t.join()
    urgent.done()


def test_a_library_that_links_others_is_left_to_numbas_route():
    """A library that links others (Numba's runtime, where its post-lowering step adds
    it: 32-bit machines) is not compiled by the worker: Numba's own finalize links them."""

    class Linking:
        _finalized = False
        _linking_libraries = ["numba's runtime"]

    job = native._Job(Linking(), "f", "f", None, ahead=False)
    assert native._machine_code(job) is None and job.running.is_set()
    finalized = []
    Linking.finalize = lambda self: finalized.append(True)
    native._finalize_with(job.library, b"code")
    assert finalized == [True]


def test_the_route_that_compiles_the_adapter_apart_still_works(anew, monkeypatch):
    """Where Numba's internals refuse the one-library route, the kernel is compiled by its
    dispatcher and its adapter apart (Numba's public route): libraries finalized on the
    calling thread, which the worker leaves alone."""
    monkeypatch.setattr(native, "_TOGETHER", [False])
    seen = []
    plain = native._machine_code

    def machine_code(job):
        code = plain(job)
        seen.append(code)
        return code

    monkeypatch.setattr(native, "_machine_code", machine_code)
    assert np.array_equal(_codes(_encode_kernel()), _want())
    assert seen == [None]


def test_a_library_with_nothing_added_has_an_empty_module():
    """fp8kit's library class keeps its modules as text until its module is read; read
    with nothing added, it is an empty module of the target, as Numba's is."""
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    library = native._library_class(codegen._library_class)(codegen, "fp8kit_empty")
    module = library._final_module
    assert module is library._final_module and not list(module.functions)
    assert module.triple  # (the target's, from Numba's empty module)


def test_a_failing_worker_falls_back_to_numbas_route_with_one_warning(anew, monkeypatch):
    """Where the worker's part fails (Numba's or llvmlite's internals not those fp8kit
    knows), the kernel is finalized by Numba's own route, with one warning."""

    def broken(job):
        raise AttributeError("no such internals")

    monkeypatch.setattr(native, "_machine_code", broken)
    monkeypatch.setattr(native, "_WARNED", set())
    with pytest.warns(RuntimeWarning, match="Numba's own route") as caught:
        assert np.array_equal(_codes(_encode_kernel()), _want())
    assert len([w for w in caught if "own route" in str(w.message)]) == 1


def test_without_threads_the_work_is_done_on_the_calling_thread(anew, monkeypatch):
    """Where no thread can start (the interpreter's shutdown, a thread limit) the worker's
    part runs on the calling thread."""
    from concurrent.futures import ThreadPoolExecutor

    def refuse(self, *args, **kwargs):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(native, "_WORKERS", [])
    monkeypatch.setattr(ThreadPoolExecutor, "submit", refuse)
    ran = []
    plain = native._machine_code

    def machine_code(job):
        ran.append(threading.current_thread() is threading.main_thread())
        return plain(job)

    monkeypatch.setattr(native, "_machine_code", machine_code)
    assert np.array_equal(_codes(_encode_kernel()), _want())
    assert ran and all(ran)


def test_quick_sizes_answer_as_llvm_does():
    """The ABI sizes and alignments remembered while a kernel compiles are LLVM's own."""
    from llvmlite import ir
    from numba.core.registry import cpu_target

    context = cpu_target.target_context
    types = [ir.IntType(8), ir.IntType(64), ir.DoubleType(), ir.IntType(8).as_pointer(),
             ir.LiteralStructType([ir.IntType(8), ir.DoubleType(), ir.IntType(16)]),
             ir.ArrayType(ir.IntType(32), 7)]  # fmt: skip
    want = [(context.get_abi_sizeof(t), context.get_abi_alignment(t)) for t in types]
    with native._quick_sizes(context):
        got = [(context.get_abi_sizeof(t), context.get_abi_alignment(t)) for t in types]
        again = [(context.get_abi_sizeof(t), context.get_abi_alignment(t)) for t in types]
    assert got == want == again
    assert "get_abi_sizeof" not in vars(context)


def test_the_sweep_starts_the_fused_kernel_ahead_where_it_takes_it(monkeypatch):
    """study.sweep starts compiling the fused quantize-and-measure kernel before its amax
    pass, for the data it takes (float32, float16, bfloat16, unmasked), and not where it
    does not (float64 or masked data: no compile for nothing)."""
    import ml_dtypes

    from fp8kit.study import _chunks

    started = []
    monkeypatch.setattr(kc.Kernel, "prefetch", lambda self: started.append(self._key))
    fmts = [get_format("float8_e4m3fn"), get_format("float8_e5m2")]
    for dtype, masked, want in [
        (np.float32, False, ("quantize_metrics", "float32")),
        (np.float16, False, ("quantize_metrics", "float32")),
        (ml_dtypes.bfloat16, False, ("quantize_metrics", "bfloat16")),
        (np.float64, False, None),
        (np.float32, True, None),
    ]:
        started.clear()
        _chunks.prefetch_fused(np.dtype(dtype), fmts, masked)
        assert started == ([] if want is None else [want]), (dtype, masked)
    # and the sweep asks, with the data's dtype
    import importlib

    asked = []
    monkeypatch.setattr(importlib.import_module("fp8kit.study.sweep"), "prefetch_fused",
                        lambda dtype, fmts, masked: asked.append((dtype, masked)))  # fmt: skip
    fp8kit.study.sweep({"w": np.ones((4, 32), np.float32)}, ["float8_e4m3fn"])
    assert asked == [(np.dtype(np.float32), False)]
    # (not where every job is NVFP4's, which take a pass of their own)
    asked.clear()
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    fp8kit.study.sweep({"w": x}, ["float4_e2m1fn"], ["nvfp4"])
    assert asked == []
    fp8kit.study.sweep({"w": x}, ["float4_e2m1fn"], ["nvfp4", "block:32"])
    assert asked == [(np.dtype(np.float32), False)]


_ENTRIES_AHEAD = """
import numpy as np
import fp8kit
from fp8kit._kernels import native
assert native.numba_route()
ahead = [k[0] for k in native._AHEAD]
fp8kit.round_to(np.ones(8, np.float32), "float8_e4m3fn", rounding="toward_zero")
print(repr((ahead, [k[0] for k in native._AHEAD], native._entries.cache_info().currsize)))
"""


def test_a_first_numba_kernel_starts_the_entries_ahead(tmp_path):
    """The CPython entries' compile starts when a first Numba kernel is about to compile
    (their machine code generated while it is typed), and is taken when they are needed."""
    import ast
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", _ENTRIES_AHEAD], env=env, capture_output=True,
                         text=True, timeout=600, check=True).stdout  # fmt: skip
    ahead, left, built = ast.literal_eval(out.strip().splitlines()[-1])
    if not ahead:
        pytest.skip("this interpreter's array layout is not the one the entries read")
    assert ahead == ["native_entries"] and left == [] and built == 1
