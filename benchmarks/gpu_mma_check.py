"""Tensor-core models against a real NVIDIA GPU (run by hand on a GPU; nothing runs it in CI).

Three parts, each reporting on its own (a failure in one prints a line and the others run):

a. **twin**: fp8kit's numba.cuda twin of the matrix-product kernels
   (:mod:`fp8kit.cuda._mma`) against the CPU kernels, bit for bit, on a few models and
   shapes, and the twin's speed on a larger product.
b. **probe**: the GPU's own fp8 tensor-core instructions, through a small CUDA C++ program
   (``benchmarks/mma_probe.cu``, built with nvcc): ``mma.sync.aligned.m16n8k32.row.col.
   f32.e4m3.e4m3.f32`` (sm_89+) and ``wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3``
   (sm_90a) on random tiles (every e4m3 exponent, exact cancellation, one large product
   among small ones, subnormals, NaN/Inf in C), compared with fp8kit.mma's models of Ada's
   mma and Hopper's wgmma.  Exact-integer tiles first check the probe's own fragment
   layouts (their results are exact under every model).
c. **scaled_mm**: ``torch._scaled_mm`` against ``fp8kit.scaled_mm(...,
   hardware="h100-pcie")`` on a few shapes (needs torch with CUDA).

Usage::

    python benchmarks/gpu_mma_check.py                 # all parts, a few minutes
    python benchmarks/gpu_mma_check.py --parts probe   # one part
    python benchmarks/gpu_mma_check.py --quick         # smaller shapes and fewer tiles

Match counts are bit-for-bit equalities of the outputs; each line says against what.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)


def say(*args) -> None:
    print(*args, flush=True)


def bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def count_equal(got, want) -> tuple[int, int, int]:
    """(equal bits, equal values with NaN as NaN, total)."""
    got, want = np.asarray(got), np.asarray(want)
    same = int((bits(got) == bits(want)).sum())
    with np.errstate(invalid="ignore"):
        value = int(((got == want) | (np.isnan(got) & np.isnan(want))).sum())
    return same, value, got.size


def e4m3_finite() -> np.ndarray:
    v = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float64)
    return v[np.isfinite(v)]


# ------------------------------------------------------------------------------- a. twin
def part_twin(quick: bool, smoke: bool = False) -> None:
    from numba import cuda

    from fp8kit import mma
    from fp8kit.cuda import _mma
    from fp8kit.mma import _engine
    from fp8kit.mma._types import TYPES

    if not cuda.is_available():
        raise RuntimeError("numba.cuda sees no GPU")
    name = getattr(cuda.get_current_device(), "name", b"the CUDA simulator")
    say(f"  device: {name.decode() if isinstance(name, bytes) else name}")
    rng = np.random.default_rng(0)

    def operand(type_name, shape):
        t = TYPES[type_name]
        if t.narrow:
            with np.errstate(invalid="ignore", over="ignore"):
                v = np.unique(np.arange(256, dtype=np.uint8).view(t.dtype).astype(np.float64))
            v = v[np.isfinite(v)]
            x = rng.choice(np.concatenate([v, -v]), size=shape)
        else:
            spread = 6 if type_name == "f16" else 20
            x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
        x[:, 1::2][: shape[0] // 2] = -x[:, 0::2][: shape[0] // 2, : x[:, 1::2].shape[1]]
        return x.astype(t.dtype)

    s = 1 if quick else 2
    cases = [
        (("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3"), (128 * s, 64, 256), {}),
        (("Hopper", "wgmma", "m64n8k32.f16.e4m3.e4m3"), (64, 32, 128), {}),
        (("Ada Lovelace", "mma", "m16n8k32.f32.e5m2.e5m2.f32"), (64 * s, 64, 128), {}),
        (("Ampere", "mma", "m16n8k16.f32.bf16.bf16.f32"), (64, 32 * s, 128), {}),
        (("Ampere", "mma", "m16n8k8.f32.tf32.tf32.f32"), (64, 32, 64), {}),
        (("CDNA3", "mfma", "f32_16x16x32_fp8_bf8"), (64, 32, 128), {}),
        (("CDNA3", "mfma", "f32_16x16x16_f16"), (64, 32, 64), {}),
        (("CDNA2", "mfma", "f32_16x16x8bf16"), (64, 32, 64), {}),
        (("CDNA1", "mfma", "f32_16x16x16f16"), (64, 32, 64), {}),
        (("CDNA3", "mfma", "f64_16x16x4_f64"), (32, 32, 64), {}),
        (("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3"), (64, 64, 512), {"nc": 128}),
        ("exact", (64, 32, 300), {}),
        ("fp32", (64, 32, 300), {}),
        ("fp32-pairwise", (64, 32, 300), {}),
    ]
    for name, (m, n, k), kw in cases:
        label = name if isinstance(name, str) else " ".join(name)
        if smoke:  # (under the CUDA simulator: a thread per output is a Python thread)
            m, n = 16, 8
        try:
            if isinstance(name, str):
                inst = name
                a = operand("f32", (m, k)).astype(np.float32)
                b = operand("f32", (n, k)).astype(np.float32).T
                c = (rng.standard_normal((m, n)) * 100).astype(np.float32).astype(np.float64)
                d_type, canonical = "f32", True
            else:
                inst = mma.instruction(*name)
                a = operand(inst.a_type, (m, k))
                b = np.ascontiguousarray(operand(inst.b_type, (n, k)).T)
                dt = TYPES[inst.c_type].dtype
                c = (rng.standard_normal((m, n)) * 4).astype(dt).astype(np.float64)
                d_type = "f32" if kw.get("nc") else inst.d_type
                canonical = bool(kw.get("nc")) or inst.model in _engine._CANONICAL
            if kw.get("nc"):
                g = k // kw["nc"]
                kw = dict(kw, gscale_a=rng.uniform(0.5, 2, (m, g)).astype(np.float32)
                          .astype(np.float64), gscale_b=rng.uniform(0.5, 2, (n, g))
                          .astype(np.float32).astype(np.float64))  # fmt: skip
            cpu = _engine.finish(_engine.launch(_engine.prepare(inst, a, b, c, **kw)), d_type,
                                 canonical)  # fmt: skip
            prep = _engine.prepare(inst, a, b, c, fast=False, **kw)
            t = time.perf_counter()
            gpu = _mma.matmul_device(prep, d_type, canonical).copy_to_host()
            dt_s = time.perf_counter() - t
            same, value, total = count_equal(gpu, cpu)
            say(f"  {label:55s} {m}x{n}x{k}: bits equal {same}/{total} "
                f"(values {value}/{total}; first call {dt_s:.2f} s)")  # fmt: skip
        except Exception as exc:  # noqa: BLE001  (report and go on)
            say(f"  {label}: FAILED: {type(exc).__name__}: {exc}")

    if smoke:
        return
    # speed on a larger product (the kernel is compiled by now)
    inst = mma.instruction("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
    m = n = 512 if quick else 1024
    k = 1024
    a = operand("e4m3", (m, k))
    b = np.ascontiguousarray(operand("e4m3", (n, k)).T)
    prep = _engine.prepare(inst, a, b, np.zeros((m, n)), fast=False)
    arrays = [cuda.to_device(np.ascontiguousarray(x)) for x in
              (prep.sa, prep.ea, prep.sb, prep.eb, prep.va, prep.vb, prep.c, prep.params,
               prep.scale_a, prep.scale_b, prep.gscale_a, prep.gscale_b)]  # fmt: skip
    out = cuda.device_array((m, n), np.float64)
    _mma.gemm_device(*arrays, out)
    cuda.synchronize()
    start, end = cuda.event(), cuda.event()
    start.record()
    _mma.gemm_device(*arrays, out)
    end.record()
    end.synchronize()
    secs = cuda.event_elapsed_time(start, end) / 1e3
    t = time.perf_counter()
    cpu = _engine.launch(_engine.prepare(inst, a, b, np.zeros((m, n))))
    cpu_s = time.perf_counter() - t
    same, _, total = count_equal(out.copy_to_host(), cpu)
    say(f"  speed, Hopper wgmma e4m3 {m}x{n}x{k}: GPU {secs * 1e3:.1f} ms "
        f"({m * n * k / secs / 1e9:.2f} G multiply-adds/s), CPU fast kernel {cpu_s:.2f} s; "
        f"bits equal {same}/{total}")  # fmt: skip


# ------------------------------------------------------------------------------- b. probe
def find_nvcc() -> str | None:
    cands = [shutil.which("nvcc")]
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            cands.append(str(Path(os.environ[env]) / "bin" / "nvcc"))
    cands.append("/usr/local/cuda/bin/nvcc")
    for sp in sys.path:  # the nvidia-cuda-nvcc wheel
        for sub in ("nvidia/cuda_nvcc/bin/nvcc", "nvidia/cu13/bin/nvcc", "nvidia/cu12/bin/nvcc"):
            cands.append(str(Path(sp) / sub))
    return next((c for c in cands if c and Path(c).is_file()), None)


def compute_capability() -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap,name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip().splitlines()[0]  # fmt: skip
        cap, name = out.split(",", 1)
        say(f"  GPU: {name.strip()} (compute capability {cap.strip()})")
        major, minor = cap.strip().split(".")
        return int(major), int(minor)
    except Exception:  # noqa: BLE001
        try:
            from numba import cuda

            return tuple(cuda.get_current_device().compute_capability)
        except Exception:  # noqa: BLE001
            return None


def build_probe(workdir: Path, cc: tuple[int, int]) -> Path:
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found (PATH, CUDA_HOME, /usr/local/cuda, nvidia-cuda-nvcc)")
    arch = "sm_90a" if cc == (9, 0) else f"sm_{cc[0]}{cc[1]}"
    exe = workdir / "mma_probe"
    cmd = [nvcc, "-O2", f"-arch={arch}", "-o", str(exe), str(HERE / "mma_probe.cu")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode:
        raise RuntimeError(f"nvcc failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    say(f"  built {exe.name} for {arch} with {nvcc}")
    return exe


def tiles(rows: int, count: int, rng) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
    """Test tiles of each kind: (kinds: name -> slice, A codes, B codes, C float32)."""
    finite = e4m3_finite()
    a = np.zeros((0, rows, 32))
    b = np.zeros((0, 32, 8))
    c = np.zeros((0, rows, 8), np.float32)
    kinds = {}

    def add(name, ta, tb, tc):
        nonlocal a, b, c
        kinds[name] = slice(len(a), len(a) + len(ta))
        a = np.concatenate([a, ta])
        b = np.concatenate([b, tb])
        c = np.concatenate([c, tc.astype(np.float32)])

    def wide_c(n, spread=30):
        return rng.standard_normal((n, rows, 8)) * np.exp2(rng.integers(-spread, spread, (n, 1, 1)))

    n = count
    # exact integers: every model gives A @ B + C exactly (checks the fragment layouts)
    ints = np.arange(-4.0, 5.0)
    ta, tb = rng.choice(ints, (4, rows, 32)), rng.choice(ints, (4, 32, 8))
    add("exact integers (layout check)", ta, tb, rng.integers(-64, 65, (4, rows, 8)))
    add("every e4m3 code", rng.choice(np.concatenate([finite, -finite]), (n, rows, 32)),
        rng.choice(np.concatenate([finite, -finite]), (n, 32, 8)), wide_c(n, 8))  # fmt: skip
    ta = rng.choice(finite, (n, rows, 32)) * rng.choice([-1, 1], (n, rows, 32))
    tb = rng.choice(finite, (n, 32, 8))
    ta[:, :, 1::2] = -ta[:, :, 0::2]
    tb[:, 1::2] = tb[:, 0::2]
    tb[:, 30:] = rng.choice(finite[finite < 0.1], (n, 2, 8))  # a small leftover
    add("exact cancellation", ta, tb, np.zeros((n, rows, 8)))
    mid = finite[(finite >= 0.25) & (finite <= 4)]  # (products partly below 13 bits)
    ta = rng.choice(mid, (n, rows, 32)) * rng.choice([-1, 1], (n, rows, 32))
    tb = rng.choice(mid, (n, 32, 8))
    ta[:, :, 0], tb[:, 0] = 448.0, 448.0
    add("one large product, small ones", ta, tb, wide_c(n, 4))
    ta = rng.standard_normal((n, rows, 32)) * 4
    tb = rng.standard_normal((n, 32, 8)) * 4
    add("normal data", ta, tb, wide_c(n, 6))
    sub = finite[finite < 2**-5]
    add("subnormals", rng.choice(np.concatenate([sub, -sub]), (n, rows, 32)),
        rng.choice(np.concatenate([sub, -sub]), (n, 32, 8)), wide_c(n, 30) * 2.0**-30)  # fmt: skip
    add("C dominates / C tiny", rng.standard_normal((n, rows, 32)),
        rng.standard_normal((n, 32, 8)), wide_c(n, 60))  # fmt: skip
    tc = wide_c(4, 4)
    tc[:, 0, 0], tc[:, 1, 1], tc[:, 2, 2] = np.inf, -np.inf, np.nan
    ta = rng.standard_normal((4, rows, 32))
    ta[:, 3, 5] = np.nan  # (e4m3fn has no Inf: its NaN code)
    add("NaN and Inf", ta, rng.standard_normal((4, 32, 8)), tc)
    with np.errstate(invalid="ignore", over="ignore"):
        ca = a.astype(E4M3).view(np.uint8)
        cb = b.astype(E4M3).view(np.uint8)
    return kinds, ca, cb, c


def run_probe(exe: Path, mode: str, ca, cb, c, workdir: Path, variant=0) -> np.ndarray:
    inp, outp = workdir / f"{mode}.in", workdir / f"{mode}.out"
    with open(inp, "wb") as f:
        f.write(np.int32(len(ca)).tobytes())
        f.write(np.ascontiguousarray(ca, np.uint8).tobytes())
        f.write(np.ascontiguousarray(cb, np.uint8).tobytes())
        f.write(np.ascontiguousarray(c, np.float32).tobytes())
    proc = subprocess.run([str(exe), mode, str(inp), str(outp), str(variant)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    if proc.returncode:
        raise RuntimeError(f"{mode} probe exited {proc.returncode}: {proc.stderr.strip()}")
    return np.fromfile(outp, np.float32).reshape(c.shape)


def models_of(ca, cb, c, insts) -> dict:
    """Each model's D tiles (float32) for the probe's tiles."""
    from fp8kit.mma import _engine

    out = {}
    for label, inst in insts.items():
        d = np.empty(c.shape, np.float32)
        for t in range(len(ca)):
            a = ca[t].view(E4M3)
            b = cb[t].view(E4M3)
            prep = _engine.prepare(inst, a, b, c[t].astype(np.float64))
            d[t] = _engine.finish(_engine.launch(prep), "f32", True)
        out[label] = d
    return out


def report(mode, d, kinds, models, exact) -> None:
    for kind, sl in kinds.items():
        parts = []
        for label, ref in models.items():
            same, _, total = count_equal(d[sl], ref[sl])
            parts.append(f"{label} {same}/{total}")
        if kind.startswith("exact integers"):
            same, _, total = count_equal(d[sl], exact[sl])
            parts.insert(0, f"exact {same}/{total}")
        say(f"    {kind:34s} " + ", ".join(parts))
    for label, ref in models.items():
        bad = np.flatnonzero(bits(d) != bits(ref))
        if bad.size:
            i = bad[0]
            say(f"    first difference from {label}: tile {i // d[0].size}, "
                f"got {float(d.flat[i])!r} ({bits(d).flat[i]:#010x}), "
                f"model {float(ref.flat[i])!r} "
                f"({bits(ref).flat[i]:#010x})")  # fmt: skip


def part_probe(quick: bool, emulate: bool = False) -> None:
    from fp8kit import mma

    rng = np.random.default_rng(1)
    count = 16 if quick else 64
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if emulate:  # (the script's own plumbing, no GPU: the models stand in for it)
            cc, exe = (9, 0), None
        else:
            cc = compute_capability()
            if cc is None:
                raise RuntimeError("no GPU found (nvidia-smi and numba.cuda)")
            if cc < (8, 9):
                raise RuntimeError(f"compute capability {cc}: fp8 mma needs sm_89 or newer")
            exe = build_probe(work, cc)
        ada = mma.instruction("Ada Lovelace", "mma", "m16n8k32.f32.e4m3.e4m3.f32")
        hop = mma.instruction("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
        hop16 = hop.replace(m=16)  # wgmma's step (32 products at once) on mma's tile
        for mode, rows, insts in (
            ("mma", 16, {"Ada mma model": ada, "Hopper wgmma model": hop16}),
            ("wgmma", 64, {"Hopper wgmma model": hop, "Ada mma model": ada.replace(m=64)}),
        ):
            try:
                if mode == "wgmma" and cc != (9, 0):
                    say(f"  wgmma: skipped (needs sm_90a; this GPU is sm_{cc[0]}{cc[1]})")
                    continue
                kinds, ca, cb, c = tiles(rows, count, rng)
                models = models_of(ca, cb, c, insts)
                a64 = ca.view(E4M3).astype(np.float64)
                b64 = cb.view(E4M3).astype(np.float64)
                exact = (a64 @ b64 + c).astype(np.float32)
                lay = kinds["exact integers (layout check)"]
                t = time.perf_counter()
                variant = 0
                if emulate:
                    d = next(iter(models.values()))
                else:
                    d = run_probe(exe, mode, ca, cb, c, work, variant)
                    if mode == "wgmma" and count_equal(d[lay], exact[lay])[0] < d[lay].size:
                        say("    wgmma: layout check failed with the descriptors' offsets as "
                            "documented; trying them swapped")  # fmt: skip
                        variant = 1
                        d = run_probe(exe, mode, ca, cb, c, work, variant)
                ok = count_equal(d[lay], exact[lay])[0] == d[lay].size
                say(
                    f"  {mode}: {len(ca)} tiles of {rows}x8x32 in {time.perf_counter() - t:.2f} s"
                    f"; layout check {'passed' if ok else 'FAILED'}"
                    + (f" (descriptor variant {variant})" if mode == "wgmma" else "")
                )
                report(mode, d, kinds, models, exact)
            except Exception as exc:  # noqa: BLE001
                say(f"  {mode}: FAILED: {type(exc).__name__}: {exc}")


# ------------------------------------------------------------------------------- c. torch
def part_scaled_mm(quick: bool) -> None:
    import torch

    import fp8kit

    if not torch.cuda.is_available():
        raise RuntimeError("torch has no CUDA device")
    say(f"  torch {torch.__version__}, {torch.cuda.get_device_name()}")
    rng = np.random.default_rng(2)
    shapes = [(16, 32, 16), (64, 256, 32), (128, 1024, 64), (64, 4096, 128)]
    if not quick:
        shapes += [(256, 8192, 256), (32, 16384, 64)]
    outs = [(np.float32, torch.float32), (ml_dtypes.bfloat16, torch.bfloat16)]
    dev = torch.device("cuda")
    for m, k, n in shapes:
        a = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-6, 6, (m, 1)))).astype(E4M3)
        b = (rng.standard_normal((k, n)) * np.exp2(rng.integers(-6, 6, (1, n)))).astype(E4M3)
        ta = torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn).to(dev)
        # mat2 column-major: the transpose of an N x K row-major tensor
        tb = torch.from_numpy(np.ascontiguousarray(b.T).view(np.uint8)).view(
            torch.float8_e4m3fn).to(dev).t()  # fmt: skip
        sa, sb = np.float32(0.75), np.float32(1.25)
        tsa = torch.tensor(float(sa), device=dev)
        tsb = torch.tensor(float(sb), device=dev)
        for od, tod in outs:
            for fast in (True, False):
                label = f"{m}x{k}x{n} {np.dtype(od).name} fast_accum={fast}"
                try:
                    got = torch._scaled_mm(ta, tb, scale_a=tsa, scale_b=tsb, out_dtype=tod,
                                           use_fast_accum=fast)  # fmt: skip
                    got = got[0] if isinstance(got, tuple) else got
                    got = got.cpu()
                    got = (got.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
                           if tod == torch.bfloat16 else got.numpy())  # fmt: skip
                    want = fp8kit.scaled_mm(a, b, sa, sb, out_dtype=od, use_fast_accum=fast,
                                            hardware="h100-pcie")  # fmt: skip
                    same, value, total = count_equal(got, want)
                    line = f"  {label:40s} bits equal {same}/{total}"
                    if same < total:
                        best = []
                        for s in (2, 4, 8):
                            if k % (128 * s) == 0:
                                w = fp8kit.scaled_mm(a, b, sa, sb, out_dtype=od,
                                                     use_fast_accum=fast, hardware="h100-pcie",
                                                     splitk=(s, "contiguous"))  # fmt: skip
                                best.append(f"splitk {s}: {count_equal(got, w)[0]}")
                        if best:
                            line += " (" + ", ".join(best) + ")"
                    say(line)
                except Exception as exc:  # noqa: BLE001
                    say(f"  {label}: FAILED: {type(exc).__name__}: {exc}")


PARTS = {"twin": part_twin, "probe": part_probe, "scaled_mm": part_scaled_mm}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS))
    parser.add_argument("--quick", action="store_true", help="smaller shapes, fewer tiles")
    parser.add_argument(
        "--emulate-probe",
        action="store_true",
        help="test the probe part's plumbing without a GPU (models as the GPU)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="twin: 16 x 8 outputs, no timing (for the CUDA simulator)",
    )
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    status = {}
    for name in args.parts:
        say(f"== {name}")
        t = time.perf_counter()
        try:
            if name == "probe":
                part_probe(args.quick, emulate=args.emulate_probe)
            elif name == "twin":
                part_twin(args.quick, smoke=args.smoke)
            else:
                PARTS[name](args.quick)
            status[name] = "ran"
        except Exception as exc:  # noqa: BLE001
            say(f"  {name}: FAILED: {type(exc).__name__}: {exc}")
            say("  " + traceback.format_exc().strip().splitlines()[-3])
            status[name] = "failed"
        say(f"  ({time.perf_counter() - t:.1f} s)")
    say(f"== done in {time.perf_counter() - t0:.0f} s: "
        + ", ".join(f"{k} {v}" for k, v in status.items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
