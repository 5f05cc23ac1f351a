"""A loose guard on what Numba has to compile for a cold first call (issue 16): kernels are
flattened (:mod:`fp8kit._kernels.flatten`) and must stay small.  Statement counts, not
timings: a kernel that grows past about twice its size when this was written (a helper
that stopped folding, a second copy of a hot loop) fails here, on any machine.

Figures when the bounds were set (statements of the flattened source): encode 53,
round-to 58, toward_zero 82, stochastic 132 (8 random bits 109, stochastic_c 146),
FakeConvert 84 (stochastic 163, OpenVINO float16 205), decode 19.
"""

from __future__ import annotations

import ast

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit._kernels import codec as kc
from fp8kit._kernels.fake import OV_F32, OV_FP16, fake_convert_kernel
from fp8kit._kernels.flatten import _is_inline, flatten
from fp8kit._kernels.rounding import MODES
from fp8kit.formats import get_format, registered_formats

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
U32 = np.dtype(np.uint32)
E4M3 = get_format("float8_e4m3fn")


def _cases():
    mode = kc.encode_mode_kernel
    return {
        "encode": (lambda: kc.encode_kernel(E4M3, F32, True)[0], 110),
        "encode float64": (lambda: kc.encode_kernel(E4M3, F64, True)[0], 110),
        "round_to": (lambda: kc.encode_kernel(E4M3, F32, True, table_dtype=U32)[0], 120),
        "toward_zero": (lambda: mode(E4M3, F32, True, MODES["toward_zero"], 32, U32)[0], 170),
        "stochastic": (lambda: mode(E4M3, F32, True, MODES["stochastic"], 32, U32)[0], 270),
        "stochastic 8 bits": (lambda: mode(E4M3, F32, True, MODES["stochastic"], 8, U32)[0], 220),
        "stochastic_c": (lambda: mode(E4M3, F32, True, MODES["stochastic_c"], 16, U32)[0], 300),
        "fake_convert": (lambda: fake_convert_kernel(E4M3, F32, False, False), 170),
        "fake_convert stochastic": (
            lambda: fake_convert_kernel(E4M3, F32, True, True, mode=MODES["stochastic"]),
            330,
        ),
        "fake_convert openvino": (
            lambda: fake_convert_kernel(E4M3, np.dtype(np.float16), True, False, openvino=OV_FP16),
            420,
        ),
        "decode": (lambda: kc.lookup_kernel(np.dtype(np.uint8), U32), 40),
    }


def _statements(func) -> int:
    tree = ast.parse(func.__flat_source__)
    return sum(isinstance(n, ast.stmt) for n in ast.walk(tree))


@pytest.mark.parametrize("name", list(_cases()))
def test_flattened_kernels_stay_small(name):
    make, bound = _cases()[name]
    flat = flatten(make()._make(False))
    # every inline helper is written into the kernel: no inlined call sites left for
    # Numba (each cost ~20 ms of a cold first call)
    assert not [k for k, v in flat.__globals__.items() if _is_inline(v)]
    assert _statements(flat) <= bound


@pytest.mark.parametrize("dtype", [F32, F64, np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)])
def test_every_format_flattens(dtype):
    """Every format's encode, round-to and rounding-mode kernels flatten (none falls back
    to the slower-compiling helper-built kernel)."""
    seen = set()
    for fmt in registered_formats().values():
        kernels = [kc.encode_kernel(fmt, dtype, True)[0]]
        kernels.append(kc.encode_kernel(fmt, dtype, False, table_dtype=U32)[0])
        for mode in ("toward_positive", "stochastic", "stochastic_half"):
            try:
                kernels.append(kc.encode_mode_kernel(fmt, dtype, True, MODES[mode], 12, U32)[0])
            except ValueError:  # (a mode the unsigned formats do not take)
                pass
        for k in kernels:
            if k._key in seen or not hasattr(k, "_make"):
                # (same code as one checked: only constants differ; or a native kernel,
                # whose size test_native_kernels_stay_small bounds)
                continue
            seen.add(k._key)
            assert _statements(flatten(k._make(False))) < 400


def test_fake_convert_variants_flatten():
    for dt in (F32, np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        for ov in (0, OV_FP16, OV_F32):
            for shift in (False, True):
                for runs in (False, True):
                    k = fake_convert_kernel(E4M3, dt, shift, runs, openvino=ov)
                    assert _statements(flatten(k._make(False))) < 500


@pytest.fixture
def helper_built(fresh_kernels):
    """Compile kernels as Numba inlines them (no flattening, no disk cache), then restore."""
    fresh_kernels(kc, "_FLATTEN", False)


def _inputs():
    rng = np.random.default_rng(16)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, 464.0, 1e-9, -2.0**-9,
                        2.0**-10, 3.0 * 2.0**-10, 1e30, -1e30], np.float32)  # fmt: skip
    x = (rng.standard_normal(300_000) * rng.choice([1e-3, 1.0, 300.0], 300_000)).astype(np.float32)
    return np.concatenate([special, x, special])


def _results(x):
    with fp8kit.num_threads(1):
        return [
            fp8kit.encode(x.astype(np.float64), "float8_e5m2fnuz"),
            fp8kit.round_to(x, "float8_e4m3fn", rounding="stochastic", seed=7),
            fp8kit.fake_convert(x, 3.0, 0.5, destination_type="f8e4m3"),
        ]


def test_flattened_kernels_give_the_helper_built_bits(request):
    x = _inputs()
    kc.FLATTEN_FALLBACKS.clear()
    flat = _results(x)
    assert not kc.FLATTEN_FALLBACKS
    request.getfixturevalue("helper_built")
    plain = _results(x)
    for a, b in zip(flat, plain, strict=True):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def _typing_rounds(kernel) -> int:
    """How many times Numba's type inference runs every constraint of ``kernel``'s
    flattened function (compiled here without the disk cache)."""
    from numba import njit
    from numba.core import typeinfer

    rounds = []
    plain = typeinfer.ConstraintNetwork.propagate

    def counted(self, ti):
        rounds.append(1)
        return plain(self, ti)

    typeinfer.ConstraintNetwork.propagate = counted
    try:
        njit(**{**kc._JIT, **kernel._options, "cache": False})(
            flatten(kernel._make(False))
        ).compile(kernel._sig)
    finally:
        typeinfer.ConstraintNetwork.propagate = plain
    return len(rounds)


def test_kernels_type_in_two_rounds():
    """Every statement is typed once and confirmed once: a loop-carried variable that starts
    as a literal (``n = 0``, ``hit = False``) widens on the back edge and costs Numba two
    more rounds over the whole kernel (~0.05-0.1 s of a cold study, measured)."""

    kernels = {
        "encode": kc.encode_kernel(E4M3, F32, True)[0],
        "fake_convert": fake_convert_kernel(E4M3, F32, False, False),
    }
    assert {name: _typing_rounds(k) for name, k in kernels.items()} == dict.fromkeys(kernels, 2)


#: LLVM instructions each native kernel's emitter wrote when the bounds were set (bound:
#: about twice): a native kernel is compiled by LLVM alone, so its size is its compile time.
_NATIVE_SIZES = {
    "encode16_bytes": 206, "encode16_half_bytes": 209, "encode32_bytes": 253,
    "encode64_bytes": 445, "round16_bytes": 179, "round16_half_bytes": 181,
}  # fmt: skip


def test_native_kernels_stay_small():
    """The native kernels (:mod:`fp8kit._kernels.native`): every byte-lane loop and decode's
    plane lookup stays under about twice the instructions it had (a second copy of the
    block body, an unrolled table load, fails here)."""
    from fp8kit._kernels import decode, encode16, native

    sizes = {
        name: native.instruction_count(encode16._byte_native(source))
        for name, source in encode16._NATIVE.values()
    }
    assert sizes.keys() == _NATIVE_SIZES.keys()
    for name, size in sizes.items():
        assert size <= 2 * _NATIVE_SIZES[name], (name, size)
    for width in (16, 32, 64):
        assert native.instruction_count(decode._plane_native(width)) <= 2 * 86, width
    # (encode's deterministic-mode kernels, round_to's in-place ones and the lean encode:
    # written in Numba since issue 42, fp8kit._kernels.modes, inplace and lean)


def test_generic_native_kernels_stay_small():
    """The generic native kernels (FakeConvert's walk, the study's passes) and the two
    CPython entries stay under about twice the LLVM instructions they had when the bounds
    were set (the third figure)."""
    from fp8kit._kernels import native
    from fp8kit._kernels.encode16 import _fake_walk_native

    generic = native.GENERIC_TYPE
    layout = native._array_layout()
    cases = {
        "fake walk": (_fake_walk_native(32), generic, 241),
        "fake walk 16-bit": (_fake_walk_native(16), generic, 279),
        # (the study's kernels (amax runs, metrics, quantize metrics, quantize runs) are
        # written in Numba since issue 42: fp8kit._kernels.metrics, quantize)
    }
    if layout is not None:
        cases["entry"] = (native._entry_emitter(layout), native.ENTRY_TYPE, 119)
        cases["generic entry"] = (native._generic_entry_emitter(layout), native.ENTRY_TYPE, 82)
    for name, (emit, fnty, size) in cases.items():
        assert native.instruction_count(emit, fnty) <= 2 * size, name


_LEAN_CODE = """
import sys
import numpy as np
import fp8kit
from fp8kit import study
from fp8kit._kernels import native

x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
for fmt in ["float8_e4m3fn", "bfloat16", "float4_e2m1fn", "p3109_k8p1ue", "float8_e8m0fnu"]:
    for dtype in (np.float32, np.float64):
        fp8kit.round_to(x.astype(dtype), fmt)
        fp8kit.round_to(x.astype(dtype), fmt, rounding="stochastic", seed=1)
        fp8kit.round_to(x.astype(dtype), fmt, rounding="toward_zero")
        fp8kit.decode(fp8kit.encode(x.astype(dtype), fmt), fmt)
fp8kit.fake_convert(x, np.float32(2), np.float32(0), "f8e4m3")
m = x.reshape(64, 64)
for scaling in ("tensor", "channel", "block"):
    study.error_metrics(m, study.quantize(m, "float8_e4m3fn", scaling))
study.sweep(m, ["float8_e4m3fn", "float4_e2m1fn"])
fp8kit.fake_convert(x, np.float32(2), np.float32(0.5), "f8e4m3", mode="openvino")
fp8kit.round_to(x, "float8_e4m3fn", flush_subnormals=True)
lean = ("numba.np.arraymath" in sys.modules, "scipy.linalg" in sys.modules,
        list(native.LEAN_RETRIES), list(native.SSA_RETRIES))

import numba

@numba.njit
def total(a):
    return np.sum(a)

print(repr((lean, float(total(np.arange(4.0))), "numba.np.arraymath" in sys.modules)))
"""


def test_first_calls_load_only_the_lowering_kernels_use(tmp_path):
    """A process's first kernels compile with Numba's lean registries: none needs more
    (no retry with all of them), and neither ``numba.np.arraymath`` nor the
    ``scipy.linalg`` it imports is loaded (0.1-0.25 s of every cold first call); a user's
    own ``@njit`` code compiled afterwards gets all of Numba's lowering as usual."""
    import ast
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", _LEAN_CODE], env=env, capture_output=True,
                         text=True, timeout=600, check=True).stdout  # fmt: skip
    lean, total, full = ast.literal_eval(out.strip().splitlines()[-1])
    assert lean == (False, False, [], [])
    assert total == 6.0 and full


_AFTER_USER_CODE = """
import numpy as np
from numba import njit
import fp8kit
from fp8kit._kernels import native

@njit
def first(a):  # (the user's own Numba code, compiled before any of fp8kit's kernels)
    return a[0] + 1

first(np.ones(3))
x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
fp8kit.round_to(x, "float8_e4m3fn")
fp8kit.fake_convert(x, np.float32(2), np.float32(0), "f8e4m3")
print(repr(native.LEAN_RETRIES))
"""


def test_kernels_after_user_numba_code_compile_once(tmp_path):
    """After a full load of Numba's lowering (a user's ``@njit`` compiled first), Numba puts
    an intrinsic's lowering into the context's first registry; the lean load installs that
    too, else every kernel compiled twice (found under the CUDA simulator's tests)."""
    import ast
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    cmd = [sys.executable, "-c", _AFTER_USER_CODE]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                         check=True).stdout  # fmt: skip
    assert ast.literal_eval(out.strip().splitlines()[-1]) == []


_RETRY_CODE = """
import ctypes, sys
import numpy as np
from numba import njit, types
from numba.core.compiler_lock import global_compiler_lock
from fp8kit._kernels import native

def kernel(a):
    return np.int64(np.sum(a))  # (np.sum: lowered by numba.np.arraymath, not lean)

sig = types.int64(types.Array(types.float64, 1, "C", readonly=True))
with global_compiler_lock:  # (as numba_address holds it)
    library, symbol = native._compile_numba((kernel, njit(kernel)), sig, False, (), "leantest")
    address = library.get_pointer_to_function(symbol)
a = np.arange(10.0)
want, _ = native.kind_word(8, False)
call = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                        ctypes.c_int64)(address)
ptrs = (ctypes.c_void_p * 2)(0, a.ctypes.data)
ints = (ctypes.c_int64 * 2)(0, a.size)
kinds = (ctypes.c_int64 * 2)(0, want)
print(repr((call(ptrs, ints, kinds, 2), native.LEAN_RETRIES)))
"""


def test_a_kernel_needing_more_lowering_compiles_with_all_of_it(tmp_path):
    """A kernel that uses lowering outside the lean registries (here ``np.sum``) is not
    refused: it compiles again with all of Numba's, gives the right result, and the retry
    is counted (the test above keeps fp8kit's own kernels off that slower path)."""
    import ast
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", _RETRY_CODE], env=env, capture_output=True,
                         text=True, timeout=600, check=True).stdout  # fmt: skip
    result, retries = ast.literal_eval(out.strip().splitlines()[-1])
    assert result == 45
    assert len(retries) == 1 and retries[0][0] == "kernel"


_SSA_CODE = """
import ctypes
import numpy as np
from numba import njit, types
from numba.core.compiler_lock import global_compiler_lock
from fp8kit._kernels import native

def retyped(a):
    y = np.float32(a[0])
    t = y * y  # (float32: the definition reaching here is float32)
    if a[0] > 0:  # (another block: Numba renames a redefinition within one block itself)
        y = t * 2.0  # (float64: typed without SSA, y would be float64 above too)
    return np.int64(t * 2.0**40) + np.int64(y > 0)

def merged(a):
    if a[0] > 0:
        v = np.uint32(7)
        r = (a[0], np.int64(1))  # (a tuple of one type in both branches, as a helper's result)
    else:
        v = np.uint64(9)
        r = (a[0] * 2.0, np.int64(2))
    return np.int64(v + np.uint64(1)) + r[1]  # (uint64 either way: one type is enough)

sig = types.int64(types.Array(types.float64, 1, "C", readonly=True))
a = np.array([1.0 / 3.0])
want, _ = native.kind_word(8, False)
got = []
for fn, digest in ((retyped, "ssatest1"), (merged, "ssatest2")):
    with global_compiler_lock:  # (as numba_address holds it)
        # (as fp8kit's kernels: without Numba's runtime, so the lean pipeline types them)
        disp = njit(fn, _nrt=False, error_model="numpy")
        library, symbol = native._compile_numba((fn, disp), sig, False, (), digest)
        address = library.get_pointer_to_function(symbol)
    call = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_int64)(address)
    ptrs = (ctypes.c_void_p * 2)(0, a.ctypes.data)
    ints = (ctypes.c_int64 * 2)(0, a.size)
    kinds = (ctypes.c_int64 * 2)(0, want)
    got.append((call(ptrs, ints, kinds, 2), int(njit(fn)(a)), list(native.SSA_RETRIES)))
print(repr(got))
"""


def test_a_variable_of_two_types_compiles_in_ssa_form(tmp_path):
    """Kernels are typed without Numba's SSA pass (one type per variable), checked after
    typing: where a use would see another type in SSA form (here a float32 product that
    typing without SSA computes in float64), the kernel is typed again in SSA form and
    gives Numba's own result, the retry counted; where definitions of two types only meet
    (their unification is what every use sees), or all build one tuple type, no retry.
    (fp8kit's own kernels never retry: the lean test above.)"""
    import ast
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", _SSA_CODE], env=env, capture_output=True,
                         text=True, timeout=600, check=True).stdout  # fmt: skip
    (got1, want1, retries1), (got2, want2, retries2) = ast.literal_eval(
        out.strip().splitlines()[-1])  # fmt: skip
    third = np.float32(1.0 / 3.0)
    low = 0xFFFFFFFF  # (the entry returns the low 32 bits)
    assert got1 == want1 & low == (int(np.float64(third * third) * 2.0**40) + 1) & low
    assert got1 != (int(np.float64(third) * np.float64(third) * 2.0**40) + 1) & low  # float64
    assert len(retries1) == 1 and retries1[0][0].endswith("retyped") and "y" in retries1[0][1]
    assert got2 == want2 == 9 and retries2 == retries1


_UPGRADE_CODE = """
import warnings
import numpy as np
import fp8kit
from fp8kit._kernels import native

native._LEAN_MODULES += ("numba.no_such_module",)  # (as a Numba that moved a module)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = fp8kit.round_to(np.array([1.0, 3.3, -500.0], np.float32), "float8_e4m3fn")
    z = fp8kit.round_to(np.array([1.0, 3.3], np.float64), "float8_e5m2")
print(repr((y.tolist(), z.tolist(), native._LEAN[0], [str(w.message) for w in caught])))
"""


def test_lean_registries_that_break_fall_back_with_one_warning(tmp_path):
    """Where the lean registries fail (Numba's internals moved), kernels compile with all
    of Numba's lowering: right results, one warning naming the cost, no error."""
    import ast
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", _UPGRADE_CODE], env=env, capture_output=True,
                         text=True, timeout=600, check=True).stdout  # fmt: skip
    y, z, lean, warned = ast.literal_eval(out.strip().splitlines()[-1])
    assert y == [1.0, 3.25, -448.0] and z == [1.0, 3.5]
    assert lean is False
    assert len(warned) == 1 and "all of Numba's lowering" in warned[0]


def _branchy(a, k):
    # (loops, branches, a variable of two types over its life: what SSA and typing see)
    total = 0.0
    count = 0
    for i in range(a.size):
        v = a[i]
        if v > k:
            total += v * 2.0
        elif v < -k:
            total -= v
        else:
            count += 1
    v = count
    return total + v


def _branchy_types():
    from numba import types

    return types.Array(types.float64, 1, "C"), types.float64


def test_lean_pipeline_is_taken_only_where_what_it_leaves_out_cannot_matter():
    """The lean pipeline (no closure inlining, no array-expression rewrites, no ir.Del)
    serves functions compiled without Numba's runtime and without a nested function;
    anything else gets Numba's own pipeline."""
    from numba.core import compiler

    from fp8kit._kernels import native

    lean = native._lean_pipeline()
    flags = compiler.Flags()
    flags.nrt = False
    assert native._pipeline_for(_branchy, flags, True) is lean
    assert native._pipeline_for(_branchy, flags, False) is compiler.Compiler

    def nested(a):
        return (lambda v: v + 1)(a[0])

    assert native._pipeline_for(nested, flags, True) is compiler.Compiler
    flags.nrt = True
    assert native._pipeline_for(_branchy, flags, True) is compiler.Compiler


def test_lean_pipeline_compiles_the_same_function():
    """A function compiled by the lean pipeline runs no closure inlining, no rewrites and
    writes no ir.Del, still checks its IR, and computes what Numba's own pipeline does."""
    from numba import njit, types
    from numba.core import compiler
    from numba.core.registry import cpu_target

    from fp8kit._kernels import native

    flags = compiler.Flags()
    flags.nrt = False
    flags.no_cpython_wrapper = False
    sig = (types.Array(types.float64, 1, "C"), types.float64)
    done = compiler.compile_extra(cpu_target.typing_context, cpu_target.target_context,
                                  _branchy, sig, None, flags, {},
                                  pipeline_class=native._lean_pipeline())  # fmt: skip
    (passes,) = done.metadata["pipeline_times"].values()
    names = {name.split("_", 1)[1] for name in passes}
    assert "fp8kit_check_ir" in names and "native_lowering" in names
    assert not names & {"inline_closure_likes", "nopython_rewrites", "ir_legalization"}
    plain = njit(_branchy)
    a = np.random.default_rng(1).standard_normal(1000)
    for k in (0.0, 0.5, 3.0):
        assert done.entry_point(a, k) == plain(a, k) == _branchy(a, k)


def _compile_a_kernel_anew(monkeypatch):
    """One codec kernel compiled through fp8kit's native route, nothing read from or
    written to the disk cache, nothing reused from this process (skips where the route is
    not available here)."""
    from fp8kit._kernels import native

    monkeypatch.setattr(native, "_BUILT", {})
    monkeypatch.setattr(native, "_load", lambda *a: None)
    monkeypatch.setattr(native, "_store", lambda *a: None)
    kernel, _ = kc.encode_kernel(E4M3, F32, True, strategy="generic")
    if kernel._native() is None:
        pytest.skip("this interpreter's array layout is not the one the entry reads")


def test_the_collector_is_paused_while_a_kernel_compiles_and_restored(monkeypatch):
    """Kernels compile with Python's cyclic collector paused (its full collections of the
    heap took 0.035 s each in a first call); it runs again afterwards, also where the
    compile failed, and stays off where the user had turned it off."""
    import gc

    from fp8kit._kernels import native

    seen = []
    with native._no_gc():
        seen.append(gc.isenabled())
    assert seen == [False] and gc.isenabled()
    with pytest.raises(RuntimeError), native._no_gc():
        raise RuntimeError("a failed compile")
    assert gc.isenabled()
    gc.disable()
    try:
        with native._no_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()

    # and the route that compiles kernels takes it
    plain = native._compile_numba

    def compile_numba(*args):
        seen.append(gc.isenabled())
        return plain(*args)

    monkeypatch.setattr(native, "_compile_numba", compile_numba)
    _compile_a_kernel_anew(monkeypatch)
    assert seen[-1] is False and gc.isenabled()


def test_kernels_compile_through_the_lean_pipeline(monkeypatch):
    """fp8kit's kernel route hands its kernels (no runtime, flattened) to the lean
    pipeline; the adapter around them is IR, so nothing else goes through Numba's."""
    from numba.core import compiler

    from fp8kit._kernels import native

    used = []
    plain = compiler.compile_extra

    def compile_extra(*args, pipeline_class=compiler.Compiler, **kwargs):
        used.append((args[2].__qualname__, pipeline_class))
        return plain(*args, pipeline_class=pipeline_class, **kwargs)

    monkeypatch.setattr(compiler, "compile_extra", compile_extra)
    _compile_a_kernel_anew(monkeypatch)
    assert len(used) == 1 and used[0][1] is native._lean_pipeline()


def _typed(func, *argtypes):
    """``(typemap, calltypes)`` of ``func`` typed afresh for ``argtypes``, as text."""
    from numba import njit

    disp = njit(func)
    disp.compile(argtypes)
    (done,) = disp.overloads.values()
    annotation = done.type_annotation
    calls = sorted((str(k), str(v)) for k, v in annotation.calltypes.items())
    return sorted((k, str(v)) for k, v in annotation.typemap.items()), calls


def _array_maths(a, b):
    # (numpy's array operators, and scalar ones, and a literal: the rules the typing
    # shortcut touches and those it must leave alone)
    c = a * 2.0 + b
    c -= np.float32(1.5)
    s = np.uint32(7) & np.uint32(12)
    return c.sum() + (-c)[0] + s + abs(a[1])


def test_quick_typing_types_kernels_as_numba_does():
    """Under the typing shortcuts (calls typed once per compile; numpy's array-operator
    rule declining scalars at once) a function gets the very types and call signatures
    Numba's own route gives it, array operators included."""
    from numba import types

    from fp8kit._kernels import native

    a32 = types.Array(types.float32, 1, "C")
    for func, argtypes in ((_branchy, _branchy_types()), (_array_maths, (a32, a32))):
        plain = _typed(func, *argtypes)
        with native._quick_typing():
            quick = _typed(func, *argtypes)
        assert quick == plain
    a = np.arange(4, dtype=np.float32)
    with native._quick_typing():
        from numba import njit

        assert njit(_array_maths)(a, a) == pytest.approx(_array_maths(a, a))


def test_quick_typing_puts_numbas_rules_back():
    """The shortcuts last one compile: Numba's own methods are back after it, also where
    it failed, and nothing typed in one compile is remembered in the next."""
    from numba.core import types
    from numba.core.typing import npydecl

    from fp8kit._kernels import native

    call_type = types.Function.get_call_type
    generic = npydecl.NumpyRulesArrayOperator.generic
    with pytest.raises(RuntimeError), native._quick_typing():
        assert types.Function.get_call_type is not call_type
        assert npydecl.NumpyRulesArrayOperator.generic is not generic
        raise RuntimeError("a failed compile")
    assert types.Function.get_call_type is call_type
    assert npydecl.NumpyRulesArrayOperator.generic is generic
    assert "get_call_type" not in vars(types.Function)  # (inherited, as before)
    seen = []
    for _ in range(2):
        with native._quick_typing():
            seen.append(types.Function.get_call_type)
    # (a new memo each compile: the closures differ)
    assert seen[0] is not seen[1]


def test_quick_typing_that_breaks_falls_back_with_one_warning(monkeypatch):
    """Where Numba's internals moved, kernels are typed the usual way, with one warning."""
    import types
    import warnings

    import numba.core.typing

    from fp8kit._kernels import native

    monkeypatch.setattr(native, "_WARNED", set())
    # (the module as imports find it, less the rule; Numba's own code keeps its own)
    moved = types.ModuleType("npydecl")
    rules = vars(numba.core.typing.npydecl)
    vars(moved).update({k: v for k, v in rules.items() if k != "NumpyRulesArrayOperator"})
    monkeypatch.setattr(numba.core.typing, "npydecl", moved)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with native._quick_typing():
                assert _typed(_branchy, *_branchy_types())
    assert len(caught) == 1 and "Numba's full route" in str(caught[0].message)


def test_kernels_compile_with_quick_typing(monkeypatch):
    """fp8kit's kernel route types its kernels under the shortcuts."""
    from numba.core import types

    from fp8kit._kernels import native

    seen = []
    plain = native._compile_numba

    def compile_numba(*args):
        seen.append("get_call_type" in vars(types.Function))
        return plain(*args)

    monkeypatch.setattr(native, "_compile_numba", compile_numba)
    _compile_a_kernel_anew(monkeypatch)
    assert seen == [True] and "get_call_type" not in vars(types.Function)


def test_the_adapter_calls_the_kernel_it_does_not_inline_it(monkeypatch):
    """The kernel stays a function of its own in its library, internal and not inlined:
    the adapter's two call sites (the full entry's, x-and-out's) call it, so LLVM generates
    its machine code once, not once per call site."""
    from fp8kit._kernels import native

    seen = []
    plain = native._compile_numba

    def compile_numba(*args):
        library, symbol = plain(*args)
        seen.append((library.get_llvm_str(), symbol))
        return library, symbol

    monkeypatch.setattr(native, "_compile_numba", compile_numba)
    _compile_a_kernel_anew(monkeypatch)
    ((text, symbol),) = seen
    defined = [line for line in text.splitlines() if line.startswith("define ")]
    (kernel,) = [line for line in defined if symbol not in line]
    assert kernel.startswith("define internal") and "noinline" in text
    name = kernel.split("@", 1)[1].split("(", 1)[0]
    assert text.count(f"@{name}(") >= 3  # (its definition and the adapter's two calls)


@pytest.mark.parametrize("skip", [False, True])
def test_kernels_measured_as_fast_skip_numbas_function_passes(monkeypatch, skip):
    """A kernel with ``function_passes = False`` is optimised by the full module
    pipeline alone (no function passes, no cheap pipeline first); the others by Numba's
    three, as Numba runs them; the flag is part of the cache key.  The stochastic and
    amax kernels skip them (measured as fast), the fused study kernel does not (8%
    slower without them)."""
    from fp8kit._kernels import metrics, native

    assert metrics.amax_runs_kernel(np.dtype(np.float32)).function_passes is False
    assert metrics.amax_cols_kernel(np.dtype(np.float32)).function_passes is False
    from fp8kit._kernels import lean

    assert lean.lean_kernel(get_format("float4_e2m1fn"), F32, True).function_passes is False
    e8m0 = get_format("float8_e8m0fnu")
    assert lean.unsigned_kernel(e8m0, F32, True).function_passes is False
    assert kc.Kernel.function_passes is True
    sr, _ = kc.encode_mode_kernel(E4M3, F32, True, MODES["stochastic"], 32)
    assert sr.function_passes is False
    managers, keys = [], []
    steps = native._llvm_steps

    def llvm_steps(library):
        made = steps(library)
        managers.append([type(step.func.__self__).__name__ for step in made])
        return made

    monkeypatch.setattr(native, "_llvm_steps", llvm_steps)
    digest = native._digest
    monkeypatch.setattr(native, "_digest", lambda key, *a: keys.append(key) or digest(key, *a))
    monkeypatch.setattr(kc.Kernel, "function_passes", not skip)
    _compile_a_kernel_anew(monkeypatch)
    assert keys and keys[-1][-1] is (not skip)
    # (Numba's function passes on each function defined, its cheap module pipeline, its
    # full one; or the full one alone)
    (kinds,) = managers[-1:]
    function_passes = [k for k in kinds if "Function" in k]
    assert bool(function_passes) is not skip
    assert len(kinds) == (len(function_passes) + 2 if function_passes else 1)


def test_kernels_do_not_link_numbas_runtime_and_the_context_is_restored(monkeypatch):
    """On a 64-bit machine a kernel's library links no Numba runtime (the kernels are
    compiled without it; linking it cost a first compile 0.016 s to initialize it and
    each kernel's LLVM work); the target context's post-lowering step is Numba's own
    again after the compile (a user's @njit links the runtime as usual)."""
    from numba.core.registry import cpu_target

    from fp8kit._kernels import native

    target = cpu_target.target_context
    if target.is32bit:
        pytest.skip("32-bit machines keep Numba's post-lowering step (64-bit div/rem)")
    seen = []
    plain = native._compile_numba

    def compile_numba(*args):
        library, symbol = plain(*args)
        seen.append(library)
        return library, symbol

    monkeypatch.setattr(native, "_compile_numba", compile_numba)
    _compile_a_kernel_anew(monkeypatch)
    ((library,),) = [seen]
    assert "nrt" not in " ".join(lib.name.lower() for lib in library._linking_libraries)
    assert "post_lowering" not in vars(target)
