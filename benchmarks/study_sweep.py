"""Time a quantization-error sweep: 4 float8 formats x 3 scalings over 16M float32 values,
or the default study (2 formats x 3 scalings) of a sharded bfloat16 safetensors checkpoint.

    python benchmarks/study_sweep.py [--repeat 7] [--threads N] [--shape 4096 4096]
    python benchmarks/study_sweep.py --make-checkpoint /tmp/ckpt [--layers 16]
    python benchmarks/study_sweep.py --checkpoint /tmp/ckpt [--repeat 3] [--scheduler threads]
        [--chunk-budget 256M]

The first form prints the median wall time of the whole sweep (after one warm-up sweep that
compiles the kernels) and, for one combination, of its parts: amax, FakeConvert, metrics.
``--make-checkpoint`` writes a Llama-like 2-shard bfloat16 checkpoint (16 layers of hidden
size 2048 and MLP size 5632, embeddings and head of 32000 x 2048: 953M values, 1.9 GB).
``--checkpoint`` times ``fp8kit.study.sweep`` over its shards, warm (after one sweep that
loads the kernels and reads the files into the page cache), and prints the peak RSS of the
process and the peak of numpy's allocations (tracemalloc) of the last sweep.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import fp8kit
from fp8kit import study
from fp8kit.study.metrics import metrics_of
from fp8kit.study.scaling import group_amax

FORMATS = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
SCALINGS = ["tensor", "channel", "block:32"]


def median_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def make_checkpoint(path: str, layers: int, hidden=2048, mlp=5632, vocab=32000) -> None:
    """A 2-shard bfloat16 safetensors checkpoint with an index, as Hugging Face writes."""
    import json
    import os

    import ml_dtypes

    shapes = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in ("q", "k", "v", "o"):
            shapes[p + f"self_attn.{n}_proj.weight"] = (hidden, hidden)
        shapes[p + "mlp.gate_proj.weight"] = (mlp, hidden)
        shapes[p + "mlp.up_proj.weight"] = (mlp, hidden)
        shapes[p + "mlp.down_proj.weight"] = (hidden, mlp)
        shapes[p + "input_layernorm.weight"] = (hidden,)
        shapes[p + "post_attention_layernorm.weight"] = (hidden,)
    shapes["model.norm.weight"] = (hidden,)
    shapes["lm_head.weight"] = (vocab, hidden)
    names = list(shapes)
    half = len(names) // 2
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(0)
    weight_map = {}
    for k, part in enumerate((names[:half], names[half:])):
        fname = f"model-{k + 1:05d}-of-00002.safetensors"
        header, offset = {}, 0
        for n in part:
            size = int(np.prod(shapes[n])) * 2
            header[n] = {"dtype": "BF16", "shape": list(shapes[n]),
                         "data_offsets": [offset, offset + size]}  # fmt: skip
            offset += size
            weight_map[n] = fname
        blob = json.dumps(header).encode()
        blob += b" " * (-len(blob) % 8)
        with open(os.path.join(path, fname), "wb") as fh:
            fh.write(len(blob).to_bytes(8, "little") + blob)
            for n in part:
                shape = shapes[n]
                if len(shape) == 1:
                    a = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
                else:
                    rows = np.exp(rng.normal(0.0, 0.5, (shape[0], 1))).astype(np.float32)
                    a = rng.standard_normal(shape, dtype=np.float32) * (0.02 * rows)
                fh.write(a.astype(ml_dtypes.bfloat16).tobytes())
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": weight_map}, fh)


def time_checkpoint(args) -> None:
    import glob
    import os
    import resource
    import tracemalloc

    from fp8kit.study.io import load_tensors

    files = sorted(glob.glob(os.path.join(args.checkpoint, "*.safetensors")))
    tensors = {}
    for f in files:
        t, _ = load_tensors(f)
        if args.scheduler:
            t = {k: study.TensorFile(f, k) for k in t}
        tensors.update(t)
    n = sum(int(np.prod(t.load().shape if hasattr(t, "load") else t.shape))
            for t in tensors.values())  # fmt: skip
    budget = _size(args.chunk_budget) if args.chunk_budget else None
    kw = dict(chunk_bytes=budget, scheduler=args.scheduler)
    threads = args.threads or fp8kit.get_num_threads()
    with fp8kit.num_threads(threads):
        t0 = time.perf_counter()
        study.sweep(tensors, **kw)
        first = time.perf_counter() - t0
        times, cpu = [], []
        for i in range(args.repeat):
            if i == args.repeat - 1:
                tracemalloc.start()
            t0, c0 = time.perf_counter(), time.process_time()
            study.sweep(tensors, **kw)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        peak_alloc = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"{len(tensors)} tensors, {n:,} values in {len(files)} shards; 2 formats x 3 "
          f"scalings; {threads} threads; scheduler {args.scheduler or 'none (in process)'}; "
          f"chunk budget {args.chunk_budget or '256M (default)'}")  # fmt: skip
    print(f"first sweep (loads kernels, reads files): {first:.2f} s")
    print(f"warm sweep: median {statistics.median(times):.2f} s, best {min(times):.2f} s "
          f"({n * 6 / min(times) / 1e9:.2f} G element-recipes/s); CPU time of the process "
          f"median {statistics.median(cpu):.2f} s (less sensitive to other load)")  # fmt: skip
    print(f"peak RSS of the process {rss / 2**20:.0f} MiB (mapped file pages included); "
          f"peak numpy allocations of the last sweep {peak_alloc / 2**20:.0f} MiB")  # fmt: skip


def _size(text: str) -> int:
    from fp8kit.cli import _byte_size

    return _byte_size(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--shape", type=int, nargs="+", default=[4096, 4096])
    ap.add_argument("--make-checkpoint", metavar="DIR")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--checkpoint", metavar="DIR")
    ap.add_argument("--scheduler", default=None)
    ap.add_argument("--chunk-budget", default=None)
    args = ap.parse_args()
    if args.make_checkpoint:
        make_checkpoint(args.make_checkpoint, args.layers)
        return
    if args.checkpoint:
        time_checkpoint(args)
        return
    x = np.random.default_rng(0).standard_normal(tuple(args.shape)).astype(np.float32)
    threads = args.threads or fp8kit.get_num_threads()
    with fp8kit.num_threads(threads):
        t0 = time.perf_counter()
        study.sweep(x, FORMATS, SCALINGS)
        first = time.perf_counter() - t0
        med, best = median_time(lambda: study.sweep(x, FORMATS, SCALINGS), args.repeat)
        fmt = fp8kit.get_format("float8_e4m3fn")
        s = study.scale_for(x, fmt)
        q = np.empty_like(x)
        parts = {
            "amax (per tensor)": lambda: group_amax(x, "tensor"),
            "amax (MX blocks of 32)": lambda: group_amax(x, "block", 1, 32),
            "fake_convert": lambda: fp8kit.fake_convert(x, s, destination_type=fmt, out=q),
            "metrics": lambda: metrics_of(x, q, np.asarray(s, np.float64), fmt),
        }
        part_times = {k: median_time(f, args.repeat)[0] for k, f in parts.items()}
    n = x.size
    print(f"{len(FORMATS)} formats x {len(SCALINGS)} scalings over {n:,} float32 values, "
          f"{threads} threads, {args.repeat} repeats")  # fmt: skip
    print(f"first sweep (compiles or loads kernels): {first:.2f} s")
    print(f"sweep: median {med:.3f} s, best {best:.3f} s")
    for k, v in part_times.items():
        print(f"  {k:24s} {v * 1e3:8.1f} ms  ({n / v / 1e9:.2f} G values/s)")


if __name__ == "__main__":
    main()
