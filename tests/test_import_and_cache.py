"""`import fp8kit` compiles nothing; kernels compile on first use and load from Numba's disk
cache in a second process."""

import json
import os
import subprocess
import sys
import textwrap

import pytest


def run_python(code, env_extra, cwd=None):
    env = {**os.environ, **env_extra}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_compiles_nothing(tmp_path):
    res = run_python(
        """
        import json
        from numba.core import event
        import sys
        with event.install_recorder("numba:compile") as rec, \
                event.install_recorder("fp8kit:compile") as native:
            import fp8kit
            from fp8kit._kernels import codec
        extras = ("dask", "distributed", "xarray", "pandas", "torch", "tqdm", "onnx")
        print(json.dumps({"events": len(rec.buffer) + len(native.buffer),
                          "kernels": codec.encode_kernel.cache_info().currsize,
                          "extras": [m for m in extras if m in sys.modules]}))
        """,
        {"NUMBA_CACHE_DIR": str(tmp_path)},
    )
    assert res == {"events": 0, "kernels": 0, "extras": []}


def test_study_is_imported_on_first_use(tmp_path):
    """``fp8kit.study`` (a quarter of fp8kit's own import time) loads when first named."""
    res = run_python(
        """
        import json, sys
        import fp8kit
        before = "fp8kit.study" in sys.modules
        quantize = fp8kit.study.quantize
        from fp8kit import study
        print(json.dumps({"before": before, "after": "fp8kit.study" in sys.modules,
                          "same": study is sys.modules["fp8kit.study"],
                          "listed": "study" in fp8kit.__all__}))
        """,
        {"NUMBA_CACHE_DIR": str(tmp_path)},
    )
    assert res == {"before": False, "after": True, "same": True, "listed": True}
    with pytest.raises(AttributeError, match="no attribute 'studies'"):
        import fp8kit

        fp8kit.studies  # noqa: B018


@pytest.mark.parametrize("size", [1001, 2_000_000], ids=["serial", "parallel"])
def test_second_process_loads_kernels_from_disk_cache(tmp_path, size):
    code = f"""
        import json
        import numpy as np
        from numba.core import event
        import fp8kit
        from fp8kit._kernels import codec
        x = np.linspace(-500, 500, {size}, dtype=np.float32)
        with event.install_recorder("numba:compile") as rec, \
                event.install_recorder("fp8kit:compile") as native:
            codes = fp8kit.encode(x, "float8_e5m2")
        kernel, _ = codec.encode_kernel(fp8kit.get_format("float8_e5m2"), x.dtype, True)
        kernel = kernel.build({size} > 100_000)
        print(json.dumps({{"hits": sum(kernel.stats.cache_hits.values()),
                          "misses": sum(kernel.stats.cache_misses.values()),
                          "compiled": len(rec.buffer) + len(native.buffer),
                          "sum": int(codes.sum())}}))
    """
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    first = run_python(code, env)
    second = run_python(code, env)
    assert first["hits"] == 0 and first["compiled"] > 0
    assert second["hits"] >= 1 and second["misses"] == 0
    assert first["sum"] == second["sum"]


def test_second_process_compiles_nothing_for_any_kernel_family(tmp_path):
    """Every kernel family loads from the disk cache: a kernel that closes over a Numba
    dispatcher gets a new cache key in every process (the dispatcher pickles with a random
    id), so it would compile again in every process, silently."""
    code = """
        import json
        import numpy as np
        from numba.core import event
        import fp8kit
        x = np.linspace(-3, 3, 1001, dtype=np.float32)
        with event.install_recorder("numba:compile") as rec, \
                event.install_recorder("fp8kit:compile") as native:
            r = [
                fp8kit.encode(x, "float8_e4m3fn"),
                fp8kit.encode(x, "float8_e4m3fn", rounding="toward_zero"),
                fp8kit.encode(x, "float8_e4m3fn", rounding="stochastic", seed=3),
                fp8kit.round_to(x, "float8_e5m2", rounding="stochastic", seed=3).view(np.uint32),
                fp8kit.decode(fp8kit.encode(x, "float8_e5m2"), "float8_e5m2").view(np.uint32),
                fp8kit.fake_convert(x, 2.0, destination_type="f8e4m3").view(np.uint32),
                fp8kit.fake_convert(x, 2.0, destination_type="f8e4m3", rounding="stochastic",
                                    seed=3).view(np.uint32),
                fp8kit.fake_convert(x, 2.0, destination_type="f8e4m3",
                                    mode="openvino").view(np.uint32),
                fp8kit.cast(x, "FLOAT8E5M2", rounding="toward_positive"),
            ]
        print(json.dumps({"compiled": len(rec.buffer) + len(native.buffer),
                          "natives": len(native.buffer),
                          "sums": [int(a.astype(np.int64).sum()) for a in r]}))
    """
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    first = run_python(code, env)
    second = run_python(code, env)
    assert first["compiled"] > 0
    assert second["compiled"] == 0
    assert first["sums"] == second["sums"]
    from fp8kit._kernels.bits import cpu_has

    if cpu_has("avx512vbmi"):  # (native kernels: encode, round_to, decode, FakeConvert)
        assert first["natives"] >= 4


def test_a_damaged_native_cache_file_is_compiled_again(tmp_path):
    """A native kernel's cache file that does not load (cut short, overwritten: here
    garbage) is compiled again and replaced; the bits stay right."""
    from fp8kit._kernels.bits import cpu_has

    if not cpu_has("avx512vbmi"):
        pytest.skip("native kernels run where the CPU has AVX512-VBMI")
    code = """
        import json
        import numpy as np
        from numba.core import event
        import fp8kit
        x = np.linspace(-3, 3, 1001, dtype=np.float32)
        with event.install_recorder("fp8kit:compile") as native:
            codes = fp8kit.encode(x, "float8_e4m3fn").view(np.uint8)
        print(json.dumps({"natives": len(native.buffer), "codes": codes.tolist()}))
    """
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    first = run_python(code, env)
    files = list(tmp_path.rglob("*.native"))
    assert first["natives"] > 0 and files
    for f in files:
        f.write_bytes(b"garbage")
    damaged = run_python(code, env)
    assert damaged["natives"] == first["natives"] and damaged["codes"] == first["codes"]
    assert all(f.read_bytes() != b"garbage" for f in files)
    assert run_python(code, env) == {"natives": 0, "codes": first["codes"]}


#: Appended to a copy's fp8kit/_kernels/bits.py: every vector loop of LLVM IR written out
#: (the native kernels' too) gives its results with the lowest bit flipped.
_FLIP = """

_vector_blocks = vector_blocks


def vector_blocks(builder, intp, n, src, dst, in_ty, out_ty, body, stream=None):
    def flipped(v):
        r = body(v)
        return builder.xor(r, ir.Constant(r.type, [1] * r.type.count))

    return _vector_blocks(builder, intp, n, src, dst, in_ty, out_ty, flipped, stream)
"""


def test_an_edited_kernel_helper_never_loads_stale_code(tmp_path):
    """Issue 16: whatever caching remains stays keyed correctly.  A second process whose
    kernel helpers were edited (a copy of fp8kit; the edit flips the lowest bit of every
    vector loop's result) compiles again, with the cache the first one filled, and gives
    the edited bits where those loops run (AVX512-VBMI: encode's kernels are such loops);
    a third, with the edit undone, gives the first bits again."""
    import shutil

    import fp8kit

    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc", "*.native")
    shutil.copytree(os.path.dirname(fp8kit.__file__), src / "fp8kit", ignore=skip)
    code = """
        import json
        import numpy as np
        from numba.core import event
        import fp8kit
        from fp8kit._kernels.bits import cpu_has
        x = np.linspace(-3, 3, 1001, dtype=np.float32)
        with event.install_recorder("numba:compile") as rec, \\
                event.install_recorder("fp8kit:compile") as native:
            codes = fp8kit.encode(x, "float8_e4m3fn").view(np.uint8)
            values = fp8kit.decode(np.arange(256, dtype=np.uint8), "float8_e5m2")
        print(json.dumps({"file": fp8kit.__file__, "vbmi": cpu_has("avx512vbmi"),
                          "compiled": len(rec.buffer) + len(native.buffer),
                          "codes": codes.tolist(), "values": values.view(np.uint32).tolist()}))
    """
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(src)}
    first = run_python(code, env, cwd=src)
    assert first["file"].startswith(str(src)) and first["compiled"] > 0
    helper = src / "fp8kit" / "_kernels" / "bits.py"
    text = helper.read_text()
    helper.write_text(text + _FLIP)
    edited = run_python(code, env, cwd=src)
    assert edited["compiled"] > 0
    if first["vbmi"]:
        assert edited["codes"] == [c ^ 1 for c in first["codes"]]
    # (decode's plane kernel is checked on every code against the table when built: the
    # edited one is refused, and the table kernel gives the same values)
    assert edited["values"] == first["values"]
    helper.write_text(text)
    again = run_python(code, env, cwd=src)
    assert again["codes"] == first["codes"] and again["values"] == first["values"]


def test_a_kernel_key_does_not_change_with_references_to_its_constants():
    """A Numba kernel's cache key (native.function_key) reads its code, not marshal's bytes
    of it: marshal writes an object referenced once without a back-reference, so its bytes
    changed once Numba's compile held the constants, and with Python 3.10 the next format
    compiled the same kernel again."""
    from fp8kit._kernels.native import function_key

    scope = {}
    exec("def kernel(x):\n    y = (x, 'a_name_of_its_own', 1.2345)\n    return y\n", scope)
    kernel = scope["kernel"]
    before = function_key(kernel)
    held = [list(kernel.__code__.co_consts), list(kernel.__code__.co_varnames)]  # noqa: F841
    assert function_key(kernel) == before
    scope2 = {}
    exec("def kernel(x):\n    y = (x, 'a_name_of_its_own', 1.2346)\n    return y\n", scope2)
    assert function_key(scope2["kernel"]) != before


def test_formats_share_compiled_kernels():
    """Compile budget: a format's constants are run-time arguments, so further formats with
    the same code paths add no kernel (each used to compile its own, ~0.5 s apiece); and a
    large array runs the same build as a small one (threads run the serial build)."""
    import numpy as np

    import fp8kit
    from fp8kit._kernels.codec import compiled_count

    x = np.linspace(-500, 500, 1001, dtype=np.float32)
    fmts = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3", "float8_e3m4", "float6_e2m3fn",
            "float8_e4m3fnuz", "float8_e5m2fnuz"]  # fmt: skip
    calls = [
        lambda f: fp8kit.encode(x, f),
        lambda f: fp8kit.round_to(x, f),
        lambda f: fp8kit.encode(x, f, rounding="toward_zero"),
    ]
    for call in calls:
        # two code paths for nearest-even float32 input: byte lanes (e4m3fn) and the
        # float32 formula (e3m4: its byte-lane tables would not reproduce the formula, see
        # encode16._byte_params); the native round-to and mode kernels compile their zero
        # and NaN rules in, so the fnuz formats (no -0, one NaN) have a variant of their
        # own (~0.03 s); each compiles once, then no format adds a kernel (run alone, the
        # test must not lean on kernels other tests built)
        call(fmts[0])
        call("float8_e3m4")
        call("float8_e4m3fnuz")
        before = compiled_count()
        for f in fmts[1:]:
            call(f)
        assert compiled_count() == before, call
    fp8kit.fake_convert(x, 2.0, destination_type="f8e4m3")
    before = compiled_count()
    fp8kit.fake_convert(x, 0.5, destination_type="f8e5m2")
    fp8kit.encode(np.linspace(-1, 1, 300_000, dtype=np.float32), fmts[1])
    assert compiled_count() == before


def test_dtypes_and_layouts_share_compiled_kernels():
    """Compile budget for further input dtypes and scale layouts (issue 16): stochastic
    rounding compiles one kernel per data type and output (codes, values; the
    Numba-written kernel of issue 42 loads each type as its own loop), and nothing more
    on a second call; FakeConvert one kernel per 16-bit data type with one scale (one
    for both took 0.35 s of Numba's front end, each alone 0.19: a first call 0.43 s, not
    0.6), and one per data width for scales in any other layout."""
    import ml_dtypes
    import numpy as np

    import fp8kit
    from fp8kit._kernels.bits import cpu_has
    from fp8kit._kernels.codec import compiled_count

    x = np.linspace(-500, 500, 100_001, dtype=np.float32)
    sr = dict(rounding="stochastic", seed=1)
    others = [x.astype(ml_dtypes.bfloat16), x.astype(np.float16)]
    if cpu_has("avx512f"):
        others.append(x.astype(np.float64))
    for y in others:
        fp8kit.encode(y, "float8_e5m2", **sr)
        if cpu_has("avx512vbmi") and y.dtype != np.float64:  # (float64 values: wider planes)
            fp8kit.round_to(y, "float8_e5m2", **sr)
    before = compiled_count()
    for y in others:  # (another format: its constants are parameters, nothing compiles)
        fp8kit.encode(y, "float8_e4m3fn", **sr)
        if cpu_has("avx512vbmi") and y.dtype != np.float64:
            fp8kit.round_to(y, "float8_e4m3fn", **sr)
    assert compiled_count() == before
    h16 = [x.astype(ml_dtypes.bfloat16), x.astype(np.float16)]
    for y in h16:
        fp8kit.fake_convert(y, np.array(2.0, y.dtype))
    before = compiled_count()
    for y in h16:  # (another format: nothing compiles)
        fp8kit.fake_convert(y, np.array(2.0, y.dtype), destination_type="f8e5m2")
    assert compiled_count() == before
    m = x[:100_000].reshape(250, 400)
    fp8kit.fake_convert(m, np.full((250, 1), 2.0, np.float32))  # a scale per row
    before = compiled_count()
    fp8kit.fake_convert(m, np.full((1, 400), 2.0, np.float32))  # per column
    fp8kit.fake_convert(m, np.full(m.shape, 2.0, np.float32))  # per element
    fp8kit.fake_convert(m.reshape(-1, 8), np.full((m.size // 8, 1), 2.0, np.float32))
    assert compiled_count() == before
    fp8kit.fake_convert(m.astype(np.float16), np.full((1, 400), 2.0, np.float16))
    before = compiled_count()
    fp8kit.fake_convert(m.astype(ml_dtypes.bfloat16), np.ones((250, 1), ml_dtypes.bfloat16))
    assert compiled_count() == before


def test_study_cli_says_once_that_it_compiles(tmp_path):
    """`fp8kit study` says on stderr that it compiles when the cache is cold, and only then."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "fp8kit", "study", "--formats", "float8_e4m3fn",
           "--scaling", "tensor", "--progress"]  # fmt: skip
    runs = [
        subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=True)
        for _ in range(2)
    ]
    from fp8kit.cli import COMPILE_NOTICE

    assert runs[0].stderr.count(COMPILE_NOTICE) == 1
    assert COMPILE_NOTICE not in runs[1].stderr
    assert runs[0].stdout == runs[1].stdout


_RESULTS = """
    import hashlib, json, sys
    import ml_dtypes
    import numpy as np
    from numba.core import event
    import fp8kit
    from fp8kit._kernels import native
    if sys.argv[1] == "fallback":  # (as where the interpreter's array layout is another)
        native._array_layout = lambda: None
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((300, 256)) * rng.choice([1e-3, 1.0, 300.0], (300, 256)))
    x = x.astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    b = x.astype(ml_dtypes.bfloat16)
    with event.install_recorder("numba:compile") as rec:
        r = [
            fp8kit.encode(x, "float8_e4m3fn"), fp8kit.encode(b, "float8_e5m2"),
            fp8kit.decode(fp8kit.encode(x, "float8_e4m3fn"), "float8_e4m3fn"),
            fp8kit.round_to(x, "float8_e4m3fn"), fp8kit.round_to(b, "float8_e5m2"),
            fp8kit.round_to(x, "float8_e4m3fn", rounding="stochastic", seed=3),
            fp8kit.encode(x.astype(np.float64), "float8_e4m3fn", rounding="stochastic", seed=3),
            fp8kit.round_to(x.astype(np.float64), "float8_e4m3fnuz", saturate=False),
            fp8kit.study.quantize(x.astype(np.float64), "float8_e5m2"),
            fp8kit.fake_convert(x, np.full((1, 256), 0.5, np.float32)),
            fp8kit.fake_convert(b, np.full((300, 1), 2.0, b.dtype)),
            fp8kit.study.quantize(x, "float8_e4m3fn", "block"),
            fp8kit.study.scale_for(x, "float8_e4m3fn", "channel"),
            np.array(fp8kit.study.error_metrics(x, x * 1.01, fmt="float8_e4m3fn").sqnr_db),
            np.array([row.metrics.sqnr_db for row in fp8kit.study.sweep(
                {"w": x}, ["float8_e4m3fn", "float8_e5m2"], ["tensor", "channel", "block:32"])]),
        ]
    digest = [hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16] for a in r]
    print(json.dumps({"numba": len(rec.buffer), "digest": digest,
                      "generic": native.generic_entry() is not None}))
"""


def test_native_kernels_and_their_fallback_give_the_same_bits(tmp_path):
    """Where the interpreter's array layout is not the one the native entries read (another
    ABI), the byte-lane kernels run through the Numba trampoline and the other native
    kernels' callers take their Numba kernels: the same bits, every family."""
    import subprocess

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}

    def run(mode):
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(_RESULTS), mode], env=env,
                             check=True, capture_output=True, text=True, timeout=600)  # fmt: skip
        return json.loads(out.stdout.strip().splitlines()[-1])

    native, fallback = run("native"), run("fallback")
    assert fallback["digest"] == native["digest"]
    assert not fallback["generic"] and fallback["numba"] > 0
    from fp8kit._kernels.bits import cpu_has

    if cpu_has("avx512vbmi"):  # (every call above on native code: from the cache, the
        # Numba-written kernels (stochastic rounding) too, with no Numba compile)
        again = run("native")
        assert again["digest"] == native["digest"]
        assert native["generic"] and again["numba"] == 0


_MODE_KERNELS = """
    import json, sys, time
    import numpy as np
    from numba.core import caching
    from fp8kit import get_format
    if sys.argv[1] != "check":  # (widen the window between reading and writing the index)
        save_index = caching.IndexDataCacheFile._save_index
        caching.IndexDataCacheFile._save_index = lambda self, o: (time.sleep(0.3),
                                                                  save_index(self, o))
    from fp8kit._kernels.codec import dummy, encode_mode_kernel
    from fp8kit._kernels.rounding import MODES
    names = ["toward_zero", "toward_positive", "toward_negative", "nearest_away", "to_odd",
             "nearest_zero"]
    if sys.argv[1] != "check":  # (each filling process its own kernels, at the same time)
        names = names[int(sys.argv[1]) :: 4]
    x = np.float32([1423.5, 0.004963875, -1423.5, -0.004963875, 3.3e-5, -7.1e-8])
    fmt = get_format("float16")
    from numba.core import event
    codes = {}
    # (Numba's compiles, and fp8kit's of the kernels it runs as native code: Numba's
    # compiler called directly, no Numba event)
    with event.install_recorder("numba:compile") as rec, \
            event.install_recorder("fp8kit:compile") as native_rec:
        for name in names:  # (the Numba kernels: the native ones take these modes now)
            kernel, _ = encode_mode_kernel(fmt, x.dtype, True, MODES[name], 32)
            out = np.empty(x.size, np.uint16)
            kernel.build()(x.view(np.uint32), dummy(np.uint32), dummy(np.uint8), out,
                           np.zeros(2, np.uint32), 0, 1)
            codes[name] = out.tolist()
    print(json.dumps({"codes": codes, "compiled": len(rec.buffer) + len(native_rec.buffer)}))
"""


def test_processes_filling_one_cache_at_once_never_swap_kernels(tmp_path):
    """Numba writes a function's cache index back without a lock: processes that save
    different specializations of one kernel function at once could map one mode's key to
    another's machine code (codec._cache_lock serializes them).  Four processes fill one
    cache at once, each with kernels of its own, each pausing between reading and writing
    the index (so that without the lock their saves interleave); a fifth loads every kernel
    from it and must give the bits of a process that compiled them into a cache of its own,
    compiling none."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "shared")}
    code = textwrap.dedent(_MODE_KERNELS)
    procs = [
        subprocess.Popen([sys.executable, "-c", code, order], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for order in ("0", "1", "2", "3")
    ]  # fmt: skip
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    loaded = run_python(_MODE_KERNELS.replace("sys.argv[1]", "'check'"),
                        {"NUMBA_CACHE_DIR": str(tmp_path / "shared")})  # fmt: skip
    fresh = run_python(_MODE_KERNELS.replace("sys.argv[1]", "'check'"),
                       {"NUMBA_CACHE_DIR": str(tmp_path / "own")})  # fmt: skip
    assert loaded["codes"] == fresh["codes"]
    assert fresh["codes"]["toward_positive"] != fresh["codes"]["toward_zero"]
    # and no entry was lost (a lost one is compiled again: the same race, harmless)
    assert loaded["compiled"] == 0 and fresh["compiled"] > 0
