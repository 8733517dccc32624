#!/usr/bin/python3
"""Time PyTorch eager training steps on the training benchmark models (bench/train_models.py).

Run with /usr/bin/python3: Debian's torch 1.13 and numpy (python3-torch).

usage: /usr/bin/python3 bench/train_torch.py MODELDIR [--threads N] [--steps N] [--warmup N]
                                              [--models "mlp lenet gpt"]

MODELDIR is what train_models.py wrote. Per model: the same initial module (train_models.build),
the optimizer and batch size of MODELDIR/<model>/train.json (SGD momentum for mlp and lenet,
AdamW for gpt), cross-entropy on the model's output against Y flattened, batches taken in file
order, wrapping around. A step is forward + loss + zero_grad + backward + optimizer step, timed
with a wall clock; --steps N in all (default 30), the first --warmup (3) not counted.
torch.set_num_threads(--threads) (default 1), and OpenBLAS's own threads too (openblas_set_num_threads):
Debian's torch does its matrix products in the system BLAS, and OpenBLAS's pthreads build runs as
many threads as there are cores whatever torch is told (a 1024 matmul under "1 thread" ran on 2:
9.1 ms against 18.2 on one). It refuses to run on a BLAS that is not OpenBLAS (netlib's reference
BLAS, which libblas.so.3 points to until OpenBLAS is installed, made a step 30-50x slower: no
comparison). The kernels OpenBLAS picks follow OPENBLAS_CORETYPE (bench/train.sh sets it).
Prints one JSON line per model: {"model", "runtime": "torch", "threads", "blas", "blas_core",
"blas_threads", "steps", "warmup", "median_ms", "p90_ms", "min_ms", "mean_ms", "first_loss",
"last_loss"}.
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


BLAS = ("", "", 0)  # openblas(): set in main


def make_optimizer(params, cfg):
    if cfg["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"],
                               weight_decay=cfg["weight_decay"])
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def openblas(threads):
    """The BLAS library torch runs on: (path, OpenBLAS core name, its threads) once set to
    `threads`; exits with an error where it is not OpenBLAS."""
    # torch links libblas.so.3 (sgemm_): the file it was resolved to is the one that matters,
    # not an OpenBLAS that liblapack.so.3 may be (the two are separate alternatives in Debian)
    with open("/proc/self/maps") as f:
        libs = sorted({line.split()[-1] for line in f
                       if os.path.basename(line.split()[-1]).startswith("libblas.so")})
    if len(libs) == 1:
        lib = ctypes.CDLL(libs[0])
        if hasattr(lib, "openblas_set_num_threads") and hasattr(lib, "openblas_get_corename"):
            lib.openblas_set_num_threads(threads)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return libs[0], lib.openblas_get_corename().decode(), lib.openblas_get_num_threads()
    sys.exit("train_torch.py: torch runs its matrix products on %s, not OpenBLAS: a comparison "
             "with it would be meaningless (install OpenBLAS: apt-get install libopenblas0)"
             % (", ".join(libs) or "no libblas.so found"))


def bench(model_dir, name, steps, warmup):
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
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
    t = np.array(times[warmup:])
    return {"model": name, "runtime": "torch", "threads": torch.get_num_threads(),
            "blas": BLAS[0], "blas_core": BLAS[1], "blas_threads": BLAS[2], "steps": steps, "warmup": warmup, "median_ms": round(float(np.median(t)), 3),
            "p90_ms": round(float(np.percentile(t, 90)), 3), "min_ms": round(float(t.min()), 3),
            "mean_ms": round(float(t.mean()), 3), "first_loss": losses[0],
            "last_loss": losses[-1]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--models", default=" ".join(train_models.MODELS))
    args = ap.parse_args()
    if args.steps <= args.warmup:
        ap.error("--steps must be larger than --warmup")
    torch.set_num_threads(args.threads)
    global BLAS
    torch.ones(2, 2) @ torch.ones(2, 2)  # the BLAS is loaded with torch; this makes sure
    BLAS = openblas(args.threads)
    for name in args.models.replace(",", " ").split():
        if name not in train_models.MODELS:
            ap.error("unknown model %r (known: %s)" % (name, " ".join(train_models.MODELS)))
        print(json.dumps(bench(args.model_dir, name, args.steps, args.warmup)), flush=True)


if __name__ == "__main__":
    main()
