"""Every float32 bit pattern (2**32) through every built-in format, both saturate modes,
against ml_dtypes.  25 minutes on 2 cores; run with ``python -m pytest -m slow``."""

import numpy as np
import pytest
from conftest import BUILTIN, canonical_nan, peer_encode

import fp8kit

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:invalid value encountered")]

CHUNK = 1 << 26


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("saturate", [False, True])
def test_all_float32_inputs(name, saturate):
    out = np.empty(CHUNK, fp8kit.get_format(name).code_dtype)
    for start in range(0, 1 << 32, CHUNK):
        x = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32).view(np.float32)
        fp8kit.encode(x, name, saturate=saturate, out=out)
        want = canonical_nan(peer_encode(x, name, saturate), name, x)
        bad = np.flatnonzero(out != want)
        assert not bad.size, (hex(start + int(bad[0])), hex(out[bad[0]]), hex(want[bad[0]]))
