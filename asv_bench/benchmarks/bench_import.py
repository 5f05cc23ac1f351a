"""Start-up costs, each measured in a fresh interpreter (asv ``timeraw_`` benchmarks).

A ``timeraw_`` function returns the code to time, or ``(code, setup_code)``; asv runs the
setup and then times the code once in a new Python process per sample.
"""

# Setup for the first-call benchmarks: an empty Numba disk cache (fresh temporary
# NUMBA_CACHE_DIR, set before numba is imported, removed at exit), fp8kit imported and the
# inputs built, so the timed statement is only the first call.  Codes for decode come from
# ml_dtypes so that no fp8kit kernel has been compiled before the timed call.
_FIRST_CALL_SETUP = """
import atexit, os, shutil, subprocess, sys, tempfile
cache_dir = tempfile.mkdtemp(prefix="fp8kit-asv-numba-")
atexit.register(shutil.rmtree, cache_dir, True)
os.environ["NUMBA_CACHE_DIR"] = cache_dir
{warm}
import ml_dtypes
import numpy as np
import fp8kit
x = np.random.default_rng(0).standard_normal(4096, dtype=np.float32)
codes = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
"""

# Fills the (fresh) cache from another process first, for the warm-cache variant.
_WARM_CACHE = """
subprocess.run(
    [sys.executable, "-c",
     "import numpy as np, fp8kit; x = np.zeros(8, np.float32); "
     "fp8kit.decode(fp8kit.encode(x, 'float8_e4m3fn'), 'float8_e4m3fn')"],
    check=True,
)
"""

_FIRST_CALL = {
    "encode": "fp8kit.encode(x, 'float8_e4m3fn')",
    "decode": "fp8kit.decode(codes, 'float8_e4m3fn')",
}


def timeraw_import_fp8kit():
    """``import fp8kit`` (nothing compiles at import)."""
    return "import fp8kit"


def timeraw_import_dependencies():
    """numpy + ml_dtypes + numba alone: the floor under ``import fp8kit``."""
    return "import numpy, ml_dtypes, numba"


def timeraw_first_call_compile(op):
    """First encode/decode call with an empty Numba cache: compiles one kernel."""
    return _FIRST_CALL[op], _FIRST_CALL_SETUP.format(warm="")


timeraw_first_call_compile.params = ["encode", "decode"]
timeraw_first_call_compile.param_names = ["op"]


def timeraw_first_call_cached(op):
    """First encode/decode call when another process already filled the Numba cache."""
    return _FIRST_CALL[op], _FIRST_CALL_SETUP.format(warm=_WARM_CACHE)


timeraw_first_call_cached.params = ["encode", "decode"]
timeraw_first_call_cached.param_names = ["op"]
