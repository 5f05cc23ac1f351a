"""Ctrl-C during `fp8kit study` is quiet under every scheduler (issue 45): the command, run
as a terminal runs it (its own process group, SIGINT to the whole group mid-study), exits
with 130 and one line, no traceback from it or from Dask's workers, no worker left
running, and no output file or temporary file written."""

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRESS = re.compile(rb"study:\s+([1-9]\d*)%")

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not os.path.isdir("/proc"), reason="POSIX process groups, /proc"
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("ctrl_c")
    rng = np.random.default_rng(0)
    for i in range(12):
        np.save(d / f"t{i:02d}.npy", rng.standard_normal((128, 1024)).astype(np.float32))
    return d


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _session_members(sid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # (fields 3 and 6 of stat: the state, the session id; a zombie has ended, and
            # whether it is reaped is up to the container's init)
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry))
    return found


@pytest.mark.parametrize("scheduler", ["none", "sync", "threads", "processes"])
def test_ctrl_c_is_quiet(inputs, tmp_path, scheduler):
    if scheduler != "none":
        pytest.importorskip("dask")
    out = tmp_path / "r.json"
    # --chunk-budget 1K: thousands of tiny chunks make a study of a few MB last seconds
    cmd = [sys.executable, "-m", "fp8kit", "study", str(inputs), "--progress", "--scheduler",
           scheduler, "--chunk-budget", "1K", "--json", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    # (SIGINT at its default disposition, as a shell gives a foreground command: a test
    # run started in the background, `pytest &`, has it ignored, and the child inherits that)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=_default_sigint)  # fmt: skip
    err = b""
    try:
        deadline = time.monotonic() + 120
        while not PROGRESS.search(err):  # mid-study: some tensors done, the others running
            ready, _, _ = select.select([proc.stderr], [], [], 1)
            if ready:
                chunk = os.read(proc.stderr.fileno(), 65536)
                assert chunk, f"the study ended before it could be interrupted:\n{err.decode()}"
                err += chunk
            assert time.monotonic() < deadline, err.decode()
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        sent = time.monotonic()
        rest, more = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = (err + more).decode(errors="replace")
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "leaked" not in err, err  # (multiprocessing's resource tracker)
    assert err.endswith("fp8kit study: interrupted\n"), err
    assert rest == b""  # no table: the study did not finish
    assert took < 20, took
    assert not out.exists() and list(tmp_path.iterdir()) == []
    time.sleep(0.5)
    assert _session_members(proc.pid) == []  # no worker process left behind
