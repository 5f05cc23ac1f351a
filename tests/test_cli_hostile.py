"""Untrusted files (issue 45): names are escaped wherever they are printed or written (table,
progress, errors, CSV with no formula injection) and long ones elided in the table; sizes are
checked before anything is read (a 2 GiB member deflated into 2 MB is refused, not
decompressed); only regular files are read (a FIFO is refused, not waited on); every parse
error is one line; a file name that is not UTF-8 is carried through to every output."""

import csv
import io
import json
import os
import struct
import subprocess
import sys
import threading
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from fp8kit.cli import main
from fp8kit.study import io as study_io
from fp8kit.study.io import StudyInputError, load_inputs, read_safetensors_header

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--formats", "float8_e4m3fn", "--scaling", "tensor"]

ESC = "w\x1b[2J\x1b[31m"  # clears the screen and turns it red when printed raw
FORGED = "a\nforged  float8_e4m3fn  tensor  99.00"  # a table row of its own when raw
FORMULAS = ["=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(A1)"]
LONG = "x" * 1_000_000


def run(capsys, *argv):
    code = main(["study", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        code = {"float32": "F32", "int32": "I32"}[arr.dtype.name]
        header[name] = {"dtype": code, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}  # fmt: skip
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # (as the reference writer pads it: aligned data)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


@pytest.fixture
def hostile(tmp_path):
    rng = np.random.default_rng(0)
    names = [ESC, FORGED, *FORMULAS, LONG]
    tensors = {n: rng.standard_normal((4, 32)).astype(np.float32) for n in names}
    tensors["i\x1b]0;title\x07"] = np.arange(3, dtype=np.int32)  # skipped: named on stderr
    path = tmp_path / "m.safetensors"
    write_safetensors(path, tensors)
    return path


def test_names_are_escaped_in_the_table_and_the_long_one_elided(hostile, capsys):
    code, out, err = run(capsys, hostile, "--progress", *ARGS)
    assert code == 0, err
    for text in (out, err):
        assert "\x1b" not in text and "\x07" not in text
    table = out.split("\n\n")[0].splitlines()
    assert len(table) == 2 + 7  # header, rule, one line per tensor: no forged row
    assert table[2].startswith("w\\x1b[2J\\x1b[31m ")
    assert table[3].startswith("a\\nforged  float8_e4m3fn  tensor  99.00 ")
    assert max(map(len, out.splitlines())) < 400  # (a 10**6-character name padded every row)
    assert len(out) < 20_000
    assert "xxx...xxx" in out
    assert "i\\x1b]0;title\\x07" in err  # the skipped tensor, escaped


def test_names_are_escaped_in_the_csv_and_never_formulas(hostile, tmp_path, capsys):
    code, _, err = run(capsys, hostile, "--csv", tmp_path / "r.csv", "--json",
                       tmp_path / "r.json", *ARGS)  # fmt: skip
    assert code == 0, err
    text = (tmp_path / "r.csv").read_text()
    assert "\x1b" not in text
    limit = csv.field_size_limit(2**24)  # (the files keep the long name whole)
    try:
        rows = list(csv.DictReader(io.StringIO(text)))
    finally:
        csv.field_size_limit(limit)
    tensors = [r["tensor"] for r in rows if r["kind"] == "tensor"]
    assert tensors[:6] == ["w\\x1b[2J\\x1b[31m", "a\\nforged  float8_e4m3fn  tensor  99.00",
                           *("'" + f for f in FORMULAS)]  # fmt: skip
    for r in rows:
        for value in r.values():
            assert not value.startswith(("=", "+", "@")), value
            assert not value.startswith("-") or value == "-inf", value
    # JSON keeps the exact names (JSON escapes control characters itself)
    raw = (tmp_path / "r.json").read_text()
    assert "\x1b" not in raw
    assert [r["tensor"] for r in json.loads(raw)["rows"]][:6] == [ESC, FORGED, *FORMULAS]


def test_errors_are_one_escaped_line(tmp_path, capsys):
    bad = tmp_path / "evil\x1b[2J\nname.npy"
    code, out, err = run(capsys, bad, *ARGS)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "\x1b" not in err
    assert "evil\\x1b[2J\\nname.npy: no such file" in err


def test_progress_label_is_escaped():
    from fp8kit.study.progress import StudyProgress

    stream = io.StringIO()
    bar = StudyProgress({ESC: np.zeros(8)}, 1, stream=stream, enabled=True, delay=0,
                        use_tqdm=False)  # fmt: skip
    bar(1, 1, f"{ESC} float8_e4m3fn tensor")
    bar.close()
    assert "\x1b" not in stream.getvalue() and "\\x1b[2J" in stream.getvalue()


# ------------------------------------------------------------------ sizes before reading
def deflated_bomb(path: Path, chunks: int = 32, key: str = "w") -> int:
    """An .npz whose one float32 member is ``chunks`` x 64 MiB of zeros deflated into about
    1 MB per GiB, written by hand (deflating 2 GiB takes seconds; the deflated 64 MiB of
    zeros after a sync flush decode the same wherever they are repeated).  Returns the
    member's uncompressed size."""
    block = 64 << 20
    zeros = bytes(block)
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": "<f4", "fortran_order": False, "shape": (chunks * block // 4,)}
    )
    header = head.getvalue()
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(header + zeros) + c.flush(zlib.Z_SYNC_FLUSH)
    again = c.compress(zeros) + c.flush(zlib.Z_SYNC_FLUSH)
    data = first + again * (chunks - 1) + c.flush()
    crc = zlib.crc32(header)
    for _ in range(chunks):
        crc = zlib.crc32(zeros, crc)
    usize = len(header) + chunks * block
    name = f"{key}.npy".encode()
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(data), usize,
                        len(name), 0) + name  # fmt: skip
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc, len(data),
                          usize, len(name), 0, 0, 0, 0, 0, 0) + name  # fmt: skip
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central),
                      len(local) + len(data), 0)  # fmt: skip
    path.write_bytes(local + data + central + end)
    return usize


def test_deflated_bomb_is_refused_before_it_is_decompressed(tmp_path, capsys):
    bomb = tmp_path / "bomb.npz"
    usize = deflated_bomb(bomb)
    assert bomb.stat().st_size < 4_000_000 and usize > 2**31
    info = zipfile.ZipFile(bomb).infolist()[0]
    assert (info.file_size, info.compress_type) == (usize, zipfile.ZIP_DEFLATED)
    tracemalloc.start()
    try:
        with pytest.raises(StudyInputError, match="larger than the 1073741824 bytes"):
            load_inputs([bomb])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20  # nothing allocated for the member's data
    code, out, err = run(capsys, bomb, *ARGS)
    assert code == 1 and err.count("\n") == 1 and "member 'w'" in err


def test_compressed_members_up_to_the_limit_are_read(tmp_path, monkeypatch):
    x = np.arange(4096, dtype=np.float32).reshape(64, 64)
    np.savez_compressed(tmp_path / "c.npz", small=x[:8], big=x)
    monkeypatch.setattr(study_io, "NPZ_MEMBER_LIMIT", x[:8].nbytes + 128)
    with pytest.raises(StudyInputError, match="member 'big'"):
        load_inputs([tmp_path / "c.npz"])
    monkeypatch.setattr(study_io, "NPZ_MEMBER_LIMIT", x.nbytes + 128)
    got = load_inputs([tmp_path / "c.npz"]).tensors
    assert np.array_equal(got["big"], x) and np.array_equal(got["small"], x[:8])


def test_stored_members_are_memory_mapped(tmp_path):
    """np.savez's members are read where they lie when the zip headers leave them aligned
    for their dtype, else copied (the kernels take aligned arrays only)."""
    rng = np.random.default_rng(1)
    want = {"k" * n: rng.standard_normal((5, 7)) for n in range(1, 9)}  # (offsets mod 8 vary)
    want["f"] = np.asfortranarray(rng.standard_normal((5, 7)))
    want["e"] = np.zeros((0, 3))
    np.savez(tmp_path / "s.npz", **want)
    got = load_inputs([tmp_path / "s.npz"]).tensors
    assert any(isinstance(v, np.memmap) for v in got.values())
    for k, v in want.items():
        assert got[k].flags.aligned and np.array_equal(got[k], v) and got[k].dtype == v.dtype


def test_member_whose_header_claims_more_than_it_holds_is_refused(tmp_path):
    """The header's shape is checked against the member's size before anything is
    allocated for it (numpy would allocate what the header says)."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)}
    )
    with zipfile.ZipFile(tmp_path / "lie.npz", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("w.npy", head.getvalue() + bytes(16))
    with pytest.raises(StudyInputError, match="member 'w': its header says shape"):
        load_inputs([tmp_path / "lie.npz"])


# ------------------------------------------------------------------ parse errors: one line
def test_deeply_nested_index_is_one_line(tmp_path, capsys):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(StudyInputError, match="nested too deeply"):
        load_inputs([index])
    code, out, err = run(capsys, index, *ARGS)
    assert code == 1 and err.count("\n") == 1 and "nested too deeply" in err


def test_oversized_index_is_refused_unread(tmp_path, monkeypatch):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "a.safetensors"}}))
    monkeypatch.setattr(study_io, "MAX_INDEX_SIZE", 10)
    with pytest.raises(StudyInputError, match="an index has at most 10"):
        load_inputs([index])


@pytest.mark.parametrize(
    "content, words",
    [
        pytest.param(b"PK\x03\x04junk", "cannot read as .npz", id="bad-zip"),
        pytest.param(b"\x93NUMPY\x01\x00\xff\xff", "cannot read as .npz", id="npy-in-npz"),
    ],
)
def test_malformed_npz_is_one_line(tmp_path, capsys, content, words):
    (tmp_path / "bad.npz").write_bytes(content)
    code, _, err = run(capsys, tmp_path / "bad.npz", *ARGS)
    assert code == 1 and err.count("\n") == 1 and words in err


# ------------------------------------------------------------------ only regular files
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "p.safetensors"
    os.mkfifo(fifo)
    res = subprocess.run(
        [sys.executable, "-m", "fp8kit", "study", str(fifo), *ARGS],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert res.returncode == 1
    assert res.stderr == f"fp8kit study: error: {fifo}: is a FIFO, not a regular file (only " \
        "regular files are read)\n"  # fmt: skip
    # the readers themselves never block on one either
    done = []
    t = threading.Thread(target=lambda: done.append(_refused(read_safetensors_header, fifo)))
    t.daemon = True
    t.start()
    t.join(10)
    assert done == [True]


def _refused(fn, path):
    try:
        fn(path)
    except StudyInputError as exc:
        return "is a FIFO" in str(exc)
    return False


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_in_a_directory_is_left_out(tmp_path):
    os.mkfifo(tmp_path / "p.npy")
    np.save(tmp_path / "w.npy", np.ones(4, np.float32))
    assert list(load_inputs([tmp_path]).tensors) == ["w"]


# ------------------------------------------------------------------ non-UTF-8 file names
@pytest.mark.skipif(sys.platform != "linux", reason="byte file names")
def test_non_utf8_file_name_reaches_every_output(tmp_path, capsys):
    name = os.fsdecode(b"w\xff.npy")
    np.save(tmp_path / name, np.random.default_rng(2).standard_normal((8, 8)).astype(np.float32))
    code, out, err = run(capsys, tmp_path / name, "--csv", tmp_path / "r.csv", "--json",
                         tmp_path / "r.json", *ARGS)  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[2].startswith("w\\xff ")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "r.csv").read_text())))
    assert rows[0]["tensor"] == "w\\xff" and rows[0]["file"].endswith("w\\xff.npy")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["rows"][0]["tensor"] == "w\\xff"
