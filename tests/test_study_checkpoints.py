"""Checkpoints as study input: directories, sharded checkpoints (index.json), names and
order, the file (shard) field, float8 tensors with their scales, filters, ml_dtypes .npy
files and the command's exit codes."""

import csv
import io
import json
import mmap
import struct

import ml_dtypes
import numpy as np
import pytest

from fp8kit.cli import main
from fp8kit.study.io import (
    ScaledFloat8,
    StudyInputError,
    checkpoint_order,
    load_inputs,
    scale_blocks,
)

CODES = {
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(ml_dtypes.bfloat16): "BF16",
    np.dtype(np.float64): "F64",
    np.dtype(ml_dtypes.float8_e4m3fn): "F8_E4M3",
    np.dtype(ml_dtypes.float8_e5m2): "F8_E5M2",
    np.dtype(ml_dtypes.float8_e8m0fnu): "F8_E8M0",
    np.dtype(np.int64): "I64",
}


def write_st(path, tensors):
    """A .safetensors file of ``tensors`` in the given order (header order = data order)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {
            "dtype": CODES[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


MATMULS = ("mlp.down_proj", "self_attn.q_proj")


def mapped(arr):
    """A read-only view of a memory map (not a copy)."""
    base = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, mmap.mmap) and not arr.flags.writeable


def layer_names(n_layers):
    names = ["model.embed_tokens.weight"]
    for i in range(n_layers):
        names += [
            f"model.layers.{i}.self_attn.q_proj.weight",
            f"model.layers.{i}.mlp.down_proj.weight",
            f"model.layers.{i}.input_layernorm.weight",
        ]
    return names + ["model.norm.weight", "lm_head.weight"]


@pytest.fixture
def bf16_ckpt(tmp_path):
    """A 2-shard bfloat16 checkpoint of 12 layers, index in alphabetical order (as
    save_pretrained writes it), shards holding the tensors in alphabetical order too."""
    rng = np.random.default_rng(0)
    names = layer_names(12)
    tensors = {
        n: rng.standard_normal((8,) if "norm" in n else (8, 16)).astype(ml_dtypes.bfloat16)
        for n in names
    }
    alpha = sorted(names)
    shard_of = {n: f"model-0000{1 + (k >= len(alpha) // 2)}-of-00002.safetensors"
                for k, n in enumerate(alpha)}  # fmt: skip
    d = tmp_path / "ckpt"
    d.mkdir()
    for shard in sorted(set(shard_of.values())):
        write_st(d / shard, {n: tensors[n] for n in alpha if shard_of[n] == shard})
    index = {"metadata": {"total_size": 0}, "weight_map": {n: shard_of[n] for n in alpha}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    (d / "config.json").write_text("{}")
    return d, tensors, shard_of


def expected_order(n_layers):
    # the index's alphabetical order, with layer numbers numeric
    out = ["lm_head.weight", "model.embed_tokens.weight"]
    for i in range(n_layers):
        out += [
            f"model.layers.{i}.input_layernorm.weight",
            f"model.layers.{i}.mlp.down_proj.weight",
            f"model.layers.{i}.self_attn.q_proj.weight",
        ]
    return out + ["model.norm.weight"]


@pytest.mark.parametrize("how", ["dir", "index", "shards"])
def test_sharded_bf16_names_order_files(bf16_ckpt, how):
    d, tensors, shard_of = bf16_ckpt
    arg = {
        "dir": [d],
        "index": [d / "model.safetensors.index.json"],
        "shards": sorted(d.glob("*.safetensors")),
    }[how]
    got = load_inputs(arg)
    assert list(got.tensors) == expected_order(12)
    for name, arr in got.tensors.items():
        assert got.files[name] == str(d / shard_of[name])
        assert arr.dtype == ml_dtypes.bfloat16 and mapped(arr)
        np.testing.assert_array_equal(arr.view(np.uint16), tensors[name].view(np.uint16))
    assert not got.skipped and not got.scales


def test_order_rule():
    # the checkpoint's order of siblings is kept; numbered siblings in numeric order
    names = ["emb", "h.10.attn", "h.10.mlp", "h.2.attn", "h.2.mlp", "h.1.attn", "ln_f", "a"]
    assert checkpoint_order(names) == [
        "emb", "h.1.attn", "h.2.attn", "h.2.mlp", "h.10.attn", "h.10.mlp", "ln_f", "a"
    ]  # fmt: skip
    # h.1 has no mlp: h.1.attn is still first; text order is never used
    assert checkpoint_order(["b.2", "b.x", "b.1", "a"]) == ["b.1", "b.2", "b.x", "a"]


def test_filters(bf16_ckpt):
    d, _, _ = bf16_ckpt
    got = load_inputs([d], include=["model.layers.1*"], exclude=["*norm*"])
    assert list(got.tensors) == [
        f"model.layers.{i}.{m}.weight" for i in (1, 10, 11) for m in MATMULS
    ]  # fmt: skip
    assert got.skipped["model.layers.1.input_layernorm.weight"] == "excluded"
    assert got.skipped["lm_head.weight"] == "not included"
    with pytest.raises(StudyInputError, match="no tensors match the --include/--exclude"):
        load_inputs([d], include=["nothing*"])


def float8_ckpt(tmp_path, scale_style):
    """float8 weights and scales in the styles of FBGEMM / compressed-tensors (per channel,
    weight_scale), DeepSeek-V3 (128x128 blocks, weight_scale_inv) and per tensor."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((200, 136)) * 100).astype(ml_dtypes.float8_e4m3fn)
    v = (rng.standard_normal((64,)) * 10).astype(ml_dtypes.float8_e5m2)
    if scale_style == "channel":
        s = rng.uniform(1e-3, 1e-2, (200, 1)).astype(np.float32)
        scales, expect = {"w.weight_scale": s}, w.astype(np.float64) * s
    elif scale_style == "block":
        s = rng.uniform(1e-3, 1e-2, (2, 2)).astype(np.float32)  # ceil(200/128), ceil(136/128)
        full = np.repeat(np.repeat(s, 128, 0), 128, 1)[:200, :136]
        scales, expect = {"w.weight_scale_inv": s}, w.astype(np.float64) * full
    else:
        s = np.array(0.25, ml_dtypes.bfloat16)
        scales, expect = {"w.weight_scale": s}, w.astype(np.float64) * 0.25
    tensors = {"w.weight": w, **scales, "w.input_scale": np.float32([0.5]), "v": v,
               "norm": rng.standard_normal(8).astype(np.float32)}  # fmt: skip
    p = tmp_path / f"fp8_{scale_style}.safetensors"
    write_st(p, tensors)
    return p, expect, next(iter(scales)), v


@pytest.mark.parametrize("style", ["channel", "block", "tensor"])
def test_float8_with_scales_exact(tmp_path, style):
    p, expect, scale_name, v = float8_ckpt(tmp_path, style)
    got = load_inputs([p])
    assert list(got.tensors) == ["w.weight", "v", "norm"]
    assert got.scales == {"w.weight": scale_name}
    assert got.skipped == {scale_name: "scale", "w.input_scale": "scale"}
    w = got.tensors["w.weight"]
    assert isinstance(w, ScaledFloat8) and w.source_dtype == "float8_e4m3fn"
    full = np.asarray(w)
    # exact: float32 only when every product is a float32, compared to float64 products
    assert full.dtype == (np.float64 if style != "tensor" else np.float32)
    np.testing.assert_array_equal(full, expect)
    np.testing.assert_array_equal(w[130:170, 5], expect[130:170, 5])  # chunks decode alike
    np.testing.assert_array_equal(w[-1], expect[-1])
    np.testing.assert_array_equal(np.asarray(got.tensors["v"]), v.astype(np.float32))


def test_float8_study_runs_and_csv_has_file_column(tmp_path, capsys):
    p, _, scale_name, _ = float8_ckpt(tmp_path, "block")
    c = tmp_path / "r.csv"
    j = tmp_path / "r.json"
    code = main(["study", str(p), "--formats", "float8_e4m3fn", "--scaling", "tensor",
                 "--csv", str(c), "--json", str(j), "--no-progress"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err.splitlines() == [
        f"fp8kit study: skipped 2 tensors: 2 scale tensors ({scale_name}, w.input_scale)"
    ]
    lines = list(csv.DictReader(io.StringIO(c.read_text())))
    rows = [r for r in lines if r["kind"] == "tensor"]
    assert [(r["tensor"], r["file"]) for r in rows] == [
        (n, str(p)) for n in ("w.weight", "v", "norm")
    ]
    assert [r["file"] for r in lines if r["kind"] == "summary"] == [""]
    assert list(rows[0])[:3] == ["kind", "tensor", "file"]
    doc = json.loads(j.read_text())
    assert doc["scales"] == {"w.weight": scale_name}
    assert doc["float8_dtypes"] == {"w.weight": "float8_e4m3fn", "v": "float8_e5m2"}
    assert [r["file"] for r in doc["rows"]] == [str(p)] * 3


def test_scale_blocks_rule():
    assert scale_blocks((576, 7168), (5, 56)) == (128, 128)  # DeepSeek-V3 kv_a_proj
    assert scale_blocks((4096, 1024), (4096, 1)) == (1, 1024)
    assert scale_blocks((4096, 1024), (4096,)) == (1, 1024)
    assert scale_blocks((4096, 1024), ()) == (4096, 1024)
    assert scale_blocks((96, 30), (1, 96, 3)) == (1, 10)  # leading 1 dropped, block 30 / 3
    assert scale_blocks((10, 7), (3, 1)) == (4, 7)
    assert scale_blocks((10, 7), (6, 1)) is None


def test_bad_scale_is_one_line_error(tmp_path):
    w = np.ones((4, 6), ml_dtypes.float8_e4m3fn)
    write_st(tmp_path / "a.safetensors", {"w": w, "w_scale": np.ones((5,), np.float32)})
    with pytest.raises(StudyInputError, match=r"'w_scale' of shape \[5\] does not fit float8"):
        load_inputs([tmp_path / "a.safetensors"])
    write_st(tmp_path / "b.safetensors", {"w": w, "w_scale": np.ones(1), "w_scale_inv": np.ones(1)})
    with pytest.raises(StudyInputError, match="ambiguous"):
        load_inputs([tmp_path / "b.safetensors"])


def test_ml_dtypes_npy(tmp_path):
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "b.npy", x.astype(ml_dtypes.bfloat16))  # written as '<V2'
    np.save(tmp_path / "e5.npy", x.astype(ml_dtypes.float8_e5m2))  # '<f1'
    np.save(tmp_path / "e4.float8_e4m3fn.npy", x.astype(ml_dtypes.float8_e4m3fn))  # '<V1'
    got = load_inputs([tmp_path / "b.npy", tmp_path / "e5.npy", tmp_path / "e4.float8_e4m3fn.npy"])
    assert list(got.tensors) == ["b", "e5", "e4"]
    assert got.tensors["b"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.tensors["b"], x.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(
        np.asarray(got.tensors["e5"]), x.astype(ml_dtypes.float8_e5m2).astype(np.float32)
    )
    np.testing.assert_array_equal(
        np.asarray(got.tensors["e4"]), x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    )
    np.save(tmp_path / "e3.float8_e3m4.npy", x.astype(ml_dtypes.float8_e3m4))
    e3 = load_inputs([tmp_path / "e3.float8_e3m4.npy"]).tensors["e3"]
    assert e3.source_dtype == "float8_e3m4"
    np.testing.assert_array_equal(
        np.asarray(e3), x.astype(ml_dtypes.float8_e3m4).astype(np.float32)
    )
    np.save(tmp_path / "amb.npy", x.astype(ml_dtypes.float8_e4m3fn))
    with pytest.raises(StudyInputError, match=r"1-byte ml_dtypes types .*NAME\.<dtype>\.npy"):
        load_inputs([tmp_path / "amb.npy"])


def test_same_name_in_two_inputs_gets_file_prefix(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    np.save(a / "w.npy", np.ones(4, np.float32))
    np.save(b / "w.npy", np.ones(4, np.float32))
    np.save(b / "u.npy", np.ones(4, np.float32))
    got = load_inputs([a, b])
    assert list(got.tensors) == [f"{a / 'w.npy'}:w", f"{b / 'w.npy'}:w", "u"]
    again = load_inputs([b, b / "u.npy"])  # a file named twice is read once
    assert list(again.tensors) == ["u", "w"]


def run(capsys, *argv):
    code = main(["study", *map(str, argv), "--formats", "float8_e4m3fn", "--scaling", "tensor",
                 "--no-progress"])  # fmt: skip
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_checkpoint_table(bf16_ckpt, capsys):
    d, _, _ = bf16_ckpt
    code, out, err = run(capsys, d, "--exclude", "*norm*", "--include", "model.layers.*",
                         "--include", "lm_head*")  # fmt: skip
    assert code == 0 and err.startswith("fp8kit study: skipped 14 tensors: ")
    table = out.split("\n\n")[0].splitlines()[2:]  # the model-level summary follows
    names = [line.split()[0] for line in table]
    assert names == ["lm_head.weight"] + [
        f"model.layers.{i}.{m}.weight" for i in range(12) for m in MATMULS
    ]  # fmt: skip


@pytest.mark.parametrize(
    "setup, message",
    [
        pytest.param(lambda d: (d / "model-00002-of-00002.safetensors").unlink(),
                     "model-00002-of-00002.safetensors (of tensor", id="missing-shard"),
        pytest.param(lambda d: (d / "model.safetensors.index.json").write_text('{"weight_map": 3}'),
                     "not a safetensors index", id="bad-index"),
        pytest.param(lambda d: (d / "model.safetensors.index.json").write_text(
            '{"weight_map": {"a": "../x.safetensors"}}'), "is not a file name beside", id="escape"),
        pytest.param(lambda d: (d / "model.safetensors.index.json").write_text(
            '{"weight_map": {"a": "model-00001-of-00002.safetensors"}}'), "has no tensor 'a'",
            id="index-names-missing-tensor"),
        pytest.param(lambda d: (d / "model.safetensors.index.json").write_text(
            '{"weight_map": {"a": "pytorch_model.bin"}}'), "is not a .safetensors file",
            id="bin-shard"),
        pytest.param(lambda d: (d / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 9),
                     "header is not valid JSON", id="bad-shard"),
    ],
)  # fmt: skip
def test_cli_checkpoint_errors_one_line(bf16_ckpt, capsys, setup, message):
    d, _, _ = bf16_ckpt
    setup(d)
    code, out, err = run(capsys, d)
    assert code == 1 and not out
    assert len(err.splitlines()) == 1 and err.startswith("fp8kit study: error: ")
    assert message in err and "Traceback" not in err


def test_cli_filters_without_files_and_empty_dir(tmp_path, capsys):
    code, _, err = run(capsys, "--include", "x")
    assert code == 1 and "none given" in err
    code, _, err = run(capsys, tmp_path)
    assert code == 1 and "a directory without" in err and len(err.splitlines()) == 1


def test_scale_in_another_shard_and_index(tmp_path):
    w = np.array([[1.0, -2.0], [4.0, 0.5]], ml_dtypes.float8_e4m3fn)
    s = np.array([[0.5], [3.0]], np.float32)
    write_st(tmp_path / "m-1.safetensors", {"layers.0.w": w, "layers.1.w_scale": s})
    write_st(tmp_path / "m-2.safetensors", {"layers.1.w": w, "layers.0.w_scale": s})
    expect = w.astype(np.float64) * s
    for args in ([tmp_path / "m-1.safetensors", tmp_path / "m-2.safetensors"], [tmp_path]):
        got = load_inputs(args)
        assert list(got.tensors) == ["layers.0.w", "layers.1.w"]
        assert got.files == {"layers.0.w": str(tmp_path / "m-1.safetensors"),
                             "layers.1.w": str(tmp_path / "m-2.safetensors")}  # fmt: skip
        for t in got.tensors.values():
            np.testing.assert_array_equal(np.asarray(t), expect)


def test_npz_bfloat16_members(tmp_path):
    x = np.linspace(-1, 1, 6, dtype=np.float32).astype(ml_dtypes.bfloat16)
    np.savez(tmp_path / "m.npz", b=x, f=np.ones(3, np.float32))
    got = load_inputs([tmp_path / "m.npz"])
    assert list(got.tensors) == ["b", "f"] and got.tensors["b"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.tensors["b"], x)


def test_checkpoint_written_by_torch_and_safetensors(tmp_path):
    """A float8 + bfloat16 checkpoint saved by safetensors.torch: values as torch decodes them."""
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(256, 96, generator=g) * 30).to(torch.float8_e4m3fn)
    s = torch.rand(2, 1, generator=g) / 100  # blocks of 128 rows, DeepSeek-style
    t = {"model.layers.10.w.weight": w, "model.layers.10.w.weight_scale_inv": s,
         "model.layers.2.w.weight": w.clone(),
         "model.layers.2.w.weight_scale_inv": s * 2,
         "model.norm.weight": torch.randn(96, generator=g).to(torch.bfloat16)}  # fmt: skip
    st_torch.save_file(t, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    got = load_inputs([tmp_path])
    assert list(got.tensors) == ["model.layers.2.w.weight", "model.layers.10.w.weight",
                                 "model.norm.weight"]  # fmt: skip
    for name, scale in (("model.layers.2.w.weight", s * 2), ("model.layers.10.w.weight", s)):
        expect = t[name].to(torch.float64) * scale.to(torch.float64).repeat_interleave(128, 0)
        np.testing.assert_array_equal(np.asarray(got.tensors[name]), expect.numpy())
    norm = got.tensors["model.norm.weight"]
    np.testing.assert_array_equal(norm.astype(np.float32), t["model.norm.weight"].float().numpy())


def test_nvfp4_style_scales_are_not_studied(tmp_path):
    """ModelOpt NVFP4: packed uint8 weights, float8 block scales (weight_scale), a float32
    second-level weight_scale_2 and input_scale: none is a weight to study."""
    t = {
        "l.weight": np.zeros((4, 8), np.int64),  # packed codes: an integer dtype
        "l.weight_scale": np.ones((4, 1), ml_dtypes.float8_e4m3fn),
        "l.weight_scale_2": np.float32([0.5]),
        "l.input_scale": np.float32([2.0]),
        "norm.weight": np.ones(8, ml_dtypes.bfloat16),
        "clip.logit_scale": np.float32([1.0]),
    }
    write_st(tmp_path / "m.safetensors", t)
    got = load_inputs([tmp_path / "m.safetensors"])
    assert list(got.tensors) == ["norm.weight"]
    assert got.skipped == {"l.weight": "int64", "l.weight_scale": "scale",
                           "l.weight_scale_2": "scale", "l.input_scale": "scale",
                           "clip.logit_scale": "scale"}  # fmt: skip
    # without float8 tensors, only a scale beside its tensor is a scale
    del t["l.weight_scale"]
    write_st(tmp_path / "n.safetensors", t)
    got = load_inputs([tmp_path / "n.safetensors"])
    assert list(got.tensors) == ["l.input_scale", "norm.weight", "clip.logit_scale"]
    assert got.skipped == {"l.weight": "int64", "l.weight_scale_2": "scale"}
