"""Tests of fp8kit.cuda, bit for bit against the CPU kernels.

They run under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), which must be switched
on before numba.cuda is first imported, so they run in their own process:
tests/test_cuda.py starts ``python -m pytest tests/cuda_sim`` with the variable set and
fails if anything there fails or is skipped.  On a machine with a GPU,
``FP8KIT_TEST_GPU=1 python -m pytest tests/cuda_sim`` runs them on the device.  In any other
process they are not collected.
"""

import os

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and os.environ.get("FP8KIT_TEST_GPU") != "1":
    collect_ignore_glob = ["*.py"]
elif os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    from .gil import yield_while_polling

    yield_while_polling()
