#!/usr/bin/python3
"""Time PyTorch eager training steps on the training benchmark models (bench/train_models.py).

Run with /usr/bin/python3: Debian's torch 1.13 and numpy (python3-torch).

usage: /usr/bin/python3 bench/train_torch.py MODELDIR [--threads N] [--steps N] [--warmup N]
                                              [--models "mlp lenet gpt"] [--math fp32|bf16]
       /usr/bin/python3 bench/train_torch.py --check-blas [--threads N]

MODELDIR is what train_models.py wrote. Per model: the same initial module (train_models.build),
the optimizer and batch size of MODELDIR/<model>/train.json (SGD momentum for mlp and lenet,
AdamW for gpt), cross-entropy on the model's output against Y flattened, batches taken in file
order, wrapping around. A step is forward + loss + zero_grad + backward + optimizer step, timed
with a wall clock; --steps N in all (default 30), the first --warmup (3) not counted. --math
bf16 runs the forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's
mixed precision (matrix products and convolutions in bfloat16; weights and updates in float32).
torch.set_num_threads(--threads) (default 1), and the BLAS's own threads too (blas_in_use):
Debian's torch does its matrix products in the system BLAS, and OpenBLAS's pthreads build runs
as many threads as there are cores whatever torch is told (a 1024 matmul under "1 thread" ran on
2: 9.1 ms against 18.2 on one). It refuses a BLAS that is neither OpenBLAS nor MKL (netlib's
reference BLAS, which libblas.so.3 points to until OpenBLAS is installed, made a step 30-50x
slower: no comparison). The kernels OpenBLAS picks follow OPENBLAS_CORETYPE (bench/train.sh
sets it). --check-blas prints that BLAS and exits. Prints one JSON line per model: {"model",
"runtime": "torch", "threads", "blas", "blas_core", "blas_threads", "steps", "warmup",
"math", "median_ms", "p90_ms", "min_ms", "mean_ms", "first_loss", "last_loss"}.
"""
import argparse
import ctypes
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True   # no __pycache__ left in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_models  # noqa: E402  (next to this file)


def make_optimizer(params, cfg):
    if cfg["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"],
                               weight_decay=cfg["weight_decay"])
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def mapped_file(addr):
    """The file mapped at address addr in this process (/proc/self/maps), or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= addr < hi and len(fields) > 5:
                return fields[5]
    return None


def blas_in_use(threads):
    """(path, core, threads) of the BLAS that torch's matrix products call, its threads set to
    `threads` (OpenBLAS: openblas_set_num_threads, since its pthreads build otherwise runs one
    per core whatever torch is told; MKL: mkl_set_num_threads). Found through the address that
    torch's own library resolves sgemm_ to, whatever the file is called (Debian's libblas.so.3
    alternative, a symlink to libopenblas.so.0, a BLAS linked into libtorch_cpu). Exits with
    status 3 where it is neither OpenBLAS nor MKL (netlib's reference BLAS, which libblas.so.3
    points to until OpenBLAS is installed, made a step 30-50x slower) unless DLCC_TORCH_ANY_BLAS
    is 1."""
    with open("/proc/self/maps") as f:
        torch_libs = sorted({line.split()[-1] for line in f
                             if os.path.basename(line.split()[-1]).startswith("libtorch_cpu.so")})
    path = None
    if torch_libs:
        try:
            sgemm = ctypes.CDLL(torch_libs[0]).sgemm_
            path = mapped_file(ctypes.cast(sgemm, ctypes.c_void_p).value)
        except AttributeError:  # no sgemm_ reachable from it
            pass
    if path:
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_set_num_threads") and hasattr(lib, "openblas_get_corename"):
            lib.openblas_set_num_threads(threads)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return path, lib.openblas_get_corename().decode(), lib.openblas_get_num_threads()
        if hasattr(lib, "mkl_set_num_threads") and hasattr(lib, "mkl_get_max_threads"):
            lib.mkl_set_num_threads(ctypes.byref(ctypes.c_int(threads)))
            return path, "MKL", lib.mkl_get_max_threads()
    if os.environ.get("DLCC_TORCH_ANY_BLAS") == "1":
        return path or "unknown", "unknown", 0
    sys.stderr.write(
        "train_torch.py: torch's matrix products run on %s, which is neither OpenBLAS nor MKL: "
        "timing them against dlcc would compare with a reference BLAS. Install OpenBLAS "
        "(apt-get install libopenblas0-pthread) or point libblas.so.3 at it "
        "(update-alternatives --config libblas.so.3-x86_64-linux-gnu); DLCC_TORCH_ANY_BLAS=1 "
        "runs anyway.\n" % (path or "a BLAS not found through libtorch_cpu's sgemm_"))
    sys.exit(3)


def bench(model_dir, name, steps, warmup, blas, math="fp32"):
    d = os.path.join(model_dir, name)
    with open(os.path.join(d, "train.json")) as f:
        cfg = json.load(f)
    x, y = np.load(os.path.join(d, "X.npy")), np.load(os.path.join(d, "Y.npy"))
    b = cfg["batch"]
    batches = [(torch.from_numpy(x[i:i + b]), torch.from_numpy(y[i:i + b]).reshape(-1))
               for i in range(0, len(x) - b + 1, b)]
    model = train_models.build(name).train()
    opt = make_optimizer(model.parameters(), cfg)
    times, losses = [], []
    for s in range(steps):
        xb, yb = batches[s % len(batches)]
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=math == "bf16"):
            loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
    t = np.array(times[warmup:])
    return {"model": name, "runtime": "torch", "math": math, "threads": torch.get_num_threads(),
            "blas": blas[0], "blas_core": blas[1], "blas_threads": blas[2], "steps": steps,
            "warmup": warmup, "median_ms": round(float(np.median(t)), 3),
            "p90_ms": round(float(np.percentile(t, 90)), 3), "min_ms": round(float(t.min()), 3),
            "mean_ms": round(float(t.mean()), 3), "first_loss": losses[0],
            "last_loss": losses[-1]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--check-blas", action="store_true",
                    help="print the BLAS torch runs on as JSON and exit (3: not OpenBLAS/MKL)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--models", default=" ".join(train_models.MODELS))
    ap.add_argument("--math", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: the forward and the loss under torch.autocast (CPU, bfloat16)")
    args = ap.parse_args()
    if args.steps <= args.warmup:
        ap.error("--steps must be larger than --warmup")
    if not args.check_blas and not args.model_dir:
        ap.error("MODELDIR is needed unless --check-blas")
    torch.set_num_threads(args.threads)
    blas = blas_in_use(args.threads)
    if args.check_blas:
        print(json.dumps({"blas": blas[0], "blas_core": blas[1], "blas_threads": blas[2]}))
        return
    for name in args.models.replace(",", " ").split():
        if name not in train_models.MODELS:
            ap.error("unknown model %r (known: %s)" % (name, " ".join(train_models.MODELS)))
        result = bench(args.model_dir, name, args.steps, args.warmup, blas, args.math)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
