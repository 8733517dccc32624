#!/usr/bin/python3
"""Compare the outputs dlcc wrote with PyTorch's.

usage: compare.py MODEL_DIR ACTUAL_DIR

MODEL_DIR is one model folder written by export_models.py (manifest.json, expected/*.npy);
ACTUAL_DIR is the --output-dir given to `dlcc run`. For each output it prints its max abs and
max rel error; the last line is `max_abs_err X` (the largest over all outputs, for run.sh).
Exit status: 0 all outputs match, 1 a mismatch, 2 a missing/unreadable file or wrong shape.
"""
import json
import os
import re
import sys

import numpy as np

RTOL = 1e-4
# The atol is needed because a pure relative tolerance fails on values near zero: an output
# that PyTorch computes as 1e-9 and dlcc as 3e-9 (different summation order in a conv or matmul,
# cancellation in a residual add or LayerNorm) has a huge relative error but is numerically
# equivalent. np.allclose checks |actual - expected| <= ATOL + RTOL * |expected| elementwise.
ATOL = 1e-5
# Float32 rounding in a long sum scales with the size of its terms, not of its result: an output
# of 0.05 that a ResNet-50 head computes from partial sums of size ~50 carries an error of ~2e-5
# under any change of summation order (blocked GEMM vs PyTorch's). So the absolute tolerance also
# scales with the output's largest magnitude: ATOL_SCALE * max|expected| (1e-4 for ResNet-50).
ATOL_SCALE = 2e-6


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    model_dir, actual_dir = argv[1], argv[2]
    with open(os.path.join(model_dir, "manifest.json")) as fp:
        manifest = json.load(fp)
    rc = 0
    worst = 0.0
    for out in manifest["outputs"]:
        name = out["name"]
        exp = np.load(os.path.join(model_dir, out["file"]))
        path = os.path.join(actual_dir, sanitize(name) + ".npy")
        try:
            act = np.load(path)
        except Exception as e:
            print("  %s: cannot read dlcc output %s: %s" % (name, path, e))
            rc = max(rc, 2)
            continue
        if act.shape != exp.shape:
            print("  %s: shape mismatch: dlcc %s, torch %s" % (name, act.shape, exp.shape))
            rc = max(rc, 2)
            continue
        if act.dtype != exp.dtype:
            print("  %s: note: dtype dlcc %s, torch %s" % (name, act.dtype, exp.dtype))
        a = act.astype(np.float64)
        e = exp.astype(np.float64)
        finite = np.isfinite(a)
        diff = np.abs(a - e)
        max_abs = float(np.max(diff)) if diff.size else 0.0
        rel = diff / np.maximum(np.abs(e), 1e-30)
        max_rel = float(np.max(rel)) if rel.size else 0.0
        atol = max(ATOL, ATOL_SCALE * float(np.max(np.abs(e)))) if e.size else ATOL
        bad = ~np.isclose(a, e, rtol=RTOL, atol=atol)
        ok = bool(finite.all()) and not bad.any()
        worst = max(worst, max_abs if np.isfinite(max_abs) else float("inf"))
        line = "  %s %s: shape %s, max abs err %.3g, max rel err %.3g" % (
            "ok  " if ok else "BAD ", name, list(exp.shape), max_abs, max_rel)
        if not ok:
            nbad = int(bad.sum())
            i = np.unravel_index(int(np.argmax(np.where(bad, diff, -1.0))), exp.shape)
            line += "; %d/%d elements off (rtol %g, atol %g)" % (nbad, exp.size, RTOL, atol)
            if not finite.all():
                line += ", %d non-finite" % int((~finite).sum())
            line += "; worst at %s: dlcc %.7g, torch %.7g" % (
                list(int(k) for k in i), act[i], exp[i])
            rc = max(rc, 1)
        print(line)
    print("max_abs_err %.3g" % worst)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
