#!/usr/bin/python3
"""Compare `dlcc train`'s per-step losses with PyTorch's (tests/train/export_models.py).

Run with /usr/bin/python3 (Debian's numpy and onnx); the --ort-run mode below needs only numpy
and onnxruntime, so any python3 that has those can run it.

usage: /usr/bin/python3 tests/train/parity.py OUTDIR DLCC [--ort-python PY] [--timeout S]
       PY tests/train/parity.py --ort-run MODEL.onnx X.npy OUT.npy

OUTDIR holds what export_models.py wrote. For each model, optimizer setting (sgd, adamw,
sgd_nesterov, adamw_wd, adam: see export_models.py) and backend (mlp and gpt: native and ref;
cnn: native only, the reference interpreter is slow on convolutions) it runs

  DLCC train OUTDIR/M/model.onnx --x X.npy --y Y.npy --loss cross_entropy --optimizer O ...
       --batch 16 --steps 20 --no-shuffle --val-split 0 --quiet --log F.jsonl --backend B

and requires each step's loss within 1e-4 relative (+ 1e-6 absolute) of torch's float32 loss.
The native SGD run also writes --export OUTDIR/M/trained.onnx, which must pass onnx.checker, hold
torch's parameters after the same 20 steps (sgd_params.npz: each within 1e-3 of how far it moved,
+ 1e-6 of its largest value; torch float32 against float64 differ by <= 5e-5 of it) and give
torch's outputs (sgd_logits.npy, within 1e-3 of the largest value) with `DLCC run` and, with
--ort-python PY, with onnxruntime under PY.

Prints "PASS ..." or "FAIL ..." per comparison, then "N passed, N failed"; exit status 1 on any
failure, 2 on bad usage. --timeout: seconds allowed per dlcc command (default 300).
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

STEPS, BATCH = 20, 16
LOSS_RTOL, LOSS_ATOL = 1e-4, 1e-6
OUTPUT_RTOL = 1e-3   # of the largest |output|: 20 steps of rounding differences, not a bug
PARAM_RTOL = 1e-3    # of the largest change of the parameter (torch f32 vs f64: <= 5e-5)
PARAM_ATOL = 1e-6    # of the largest |parameter| (a gradient that is 0 but for rounding)
OPTIMIZERS = {   # dlcc flags of export_models.py's OPTIMIZERS
    "sgd": ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"],
    "adamw": ["--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0.01"],
    "sgd_nesterov": ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--nesterov",
                     "--weight-decay", "0.01"],
    "adamw_wd": ["--optimizer", "adamw", "--lr", "1e-2", "--weight-decay", "0.1"],
    "adam": ["--optimizer", "adam", "--lr", "1e-2", "--weight-decay", "0.1"],
}
BACKENDS = {"mlp": ("native", "ref"), "cnn": ("native",), "gpt": ("native", "ref"),
            "cnn_bn": ("native",)}
CASES = [(m, o, b) for m, backends in BACKENDS.items() for b in backends for o in OPTIMIZERS]


class Tally:
    def __init__(self):
        self.passed = self.failed = 0

    def ok(self, msg):
        print("PASS " + msg, flush=True)
        self.passed += 1

    def fail(self, msg):
        print("FAIL " + msg, flush=True)
        self.failed += 1


def run(cmd, timeout):
    """(exit status, combined output); status None when it timed out or could not start."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return None, "timed out after %d s" % timeout
    except OSError as e:
        return None, str(e)


def tail(text, n=3):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return " | ".join(lines[-n:]) if lines else "(no output)"


def read_log(path):
    """The log's step records in order, or a string saying what is wrong with it."""
    if not os.path.exists(path):
        return "no log written"
    steps = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                return "log line %d is not JSON: %r" % (i, line[:80])
            if isinstance(rec, dict) and "step" in rec:
                steps.append(rec)
    return steps


def check_losses(tally, label, steps, torch_losses, opt):
    lr = float(OPTIMIZERS[opt][OPTIMIZERS[opt].index("--lr") + 1])
    if isinstance(steps, str):
        return tally.fail("%s: %s" % (label, steps))
    if len(steps) != len(torch_losses):
        return tally.fail("%s: log has %d steps, expected %d" % (label, len(steps),
                                                                  len(torch_losses)))
    worst, bad = 0.0, []
    for k, (rec, ref) in enumerate(zip(steps, torch_losses), 1):
        for key in ("loss", "lr", "ms"):
            if not isinstance(rec.get(key), (int, float)):
                return tally.fail("%s: step %d: no number \"%s\" in %s" % (label, k, key, rec))
        if rec["step"] != k:
            return tally.fail("%s: record %d has \"step\": %s" % (label, k, rec["step"]))
        if abs(rec["lr"] - lr) > 1e-6 * lr or rec["ms"] < 0:
            return tally.fail("%s: step %d: lr %g (expected %g), ms %g" % (label, k, rec["lr"],
                                                                          lr, rec["ms"]))
        err = abs(rec["loss"] - ref)
        worst = max(worst, err / abs(ref))
        if not err <= LOSS_RTOL * abs(ref) + LOSS_ATOL:   # "not <=": a NaN loss fails
            bad.append((k, rec["loss"], ref))
    if bad:
        k, a, b = bad[0]
        return tally.fail("%s step %d dlcc %.9g torch %.9g (%d of %d steps differ)"
                          % (label, k, a, b, len(bad), len(steps)))
    tally.ok("%s (%d steps, max rel err %.2g)" % (label, len(steps), worst))


def compare_outputs(tally, label, got_path, want):
    if not os.path.exists(got_path):
        return tally.fail("%s: no output written (%s)" % (label, got_path))
    got = np.load(got_path)
    if got.shape != want.shape:
        return tally.fail("%s: output shape %s, expected %s" % (label, got.shape, want.shape))
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    scale = float(np.max(np.abs(want)))
    if not err <= OUTPUT_RTOL * scale:
        return tally.fail("%s: max abs err %.3g, allowed %.3g" % (label, err,
                                                                   OUTPUT_RTOL * scale))
    tally.ok("%s (max abs err %.2g)" % (label, err))


def check_params(tally, label, exported, initial_path, torch_path):
    """Each trained parameter of the export against torch's, relative to how far it moved."""
    import onnx
    from onnx import numpy_helper
    got = {i.name: numpy_helper.to_array(i) for i in exported.graph.initializer}
    init = {i.name: numpy_helper.to_array(i) for i in onnx.load(initial_path).graph.initializer}
    worst, bad = 0.0, []
    with np.load(torch_path) as want_all:
        for name in want_all.files:
            want = want_all[name].astype(np.float64)
            if name not in got:
                bad.append("%s missing" % name)
                continue
            if got[name].shape != want.shape:
                bad.append("%s shape %s, expected %s" % (name, got[name].shape, want.shape))
                continue
            moved = float(np.max(np.abs(want - init[name])))
            err = float(np.max(np.abs(got[name] - want)))
            allowed = PARAM_RTOL * moved + PARAM_ATOL * float(np.max(np.abs(want)))
            worst = max(worst, err / allowed * PARAM_RTOL)
            if not err <= allowed:
                bad.append("%s max abs err %.3g, allowed %.3g (it moved %.3g)"
                           % (name, err, allowed, moved))
        n = len(want_all.files)
    if bad:
        return tally.fail("%s parameters: %d of %d differ from torch's: %s"
                          % (label, len(bad), n, "; ".join(bad[:3])))
    tally.ok("%s parameters (%d tensors, max err %.2g of the change)" % (label, n, worst))


def check_export(tally, args, model, exported):
    d = os.path.join(args.outdir, model)
    label = "%s export" % model
    if not os.path.exists(exported):
        return tally.fail("%s: %s was not written" % (label, exported))
    import onnx
    try:
        m = onnx.load(exported)
        onnx.checker.check_model(m)
    except Exception as e:   # any complaint of the checker's is a failure
        return tally.fail("%s onnx.checker: %s" % (label, str(e).strip().splitlines()[0]))
    tally.ok("%s onnx.checker" % label)
    check_params(tally, label, m, os.path.join(d, "model.onnx"), os.path.join(d, "sgd_params.npz"))
    init = {i.name for i in m.graph.initializer}
    inputs = [i.name for i in m.graph.input if i.name not in init]
    if len(inputs) != 1 or not m.graph.output:
        return tally.fail("%s: expected one input and an output, got inputs %s" % (label, inputs))
    out_name = m.graph.output[0].name
    want = np.load(os.path.join(d, "sgd_logits.npy")).astype(np.float64)
    x = os.path.join(d, "X.npy")

    out_dir = os.path.join(d, "run-out")
    t0 = time.time()
    rc, text = run([args.dlcc, "run", exported, "--input", "%s=%s" % (inputs[0], x),
                    "--output-dir", out_dir, "--quiet"], args.timeout)
    if rc != 0:
        tally.fail("%s dlcc run: exit %s: %s" % (label, rc, tail(text)))
    else:
        compare_outputs(tally, "%s dlcc run (%.1f s)" % (label, time.time() - t0),
                        os.path.join(out_dir, out_name + ".npy"), want)

    if not args.ort_python:
        print("SKIP %s onnxruntime: no --ort-python (no onnxruntime found)" % label)
        return
    ort_out = os.path.join(d, "ort-out.npy")
    rc, text = run([args.ort_python, os.path.abspath(__file__), "--ort-run", exported, x,
                    ort_out], args.timeout)
    if rc != 0:
        return tally.fail("%s onnxruntime: exit %s: %s" % (label, rc, tail(text)))
    compare_outputs(tally, "%s onnxruntime" % label, ort_out, want)


def ort_run(model, x_path, out_path):
    """--ort-run: the first output of MODEL on X with onnxruntime, saved to OUT."""
    import onnxruntime as ort
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: np.load(x_path)}
    np.save(out_path, sess.run(None, feed)[0])


def parse_args(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("dlcc")
    ap.add_argument("--ort-python", help="a python3 with onnxruntime and numpy")
    ap.add_argument("--timeout", type=int, default=300)
    return ap.parse_args(argv)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--ort-run":
        return ort_run(*sys.argv[2:])
    args = parse_args(sys.argv[1:])
    tally = Tally()
    if not os.access(args.dlcc, os.X_OK):
        tally.fail("%s is not an executable (build dlcc first)" % args.dlcc)
        print("0 passed, 1 failed")
        return 1
    for model, opt, backend in CASES:
        d = os.path.join(args.outdir, model)
        label = "%s %s %s" % (model, opt, backend)
        with open(os.path.join(d, "losses.json")) as f:
            torch_losses = json.load(f)[opt]
        log = os.path.join(d, "%s-%s.jsonl" % (opt, backend))
        if os.path.exists(log):
            os.remove(log)
        cmd = [args.dlcc, "train", os.path.join(d, "model.onnx"),
               "--x", os.path.join(d, "X.npy"), "--y", os.path.join(d, "Y.npy"),
               "--loss", "cross_entropy"] + OPTIMIZERS[opt] + [
               "--batch", str(BATCH), "--steps", str(STEPS), "--no-shuffle", "--val-split", "0",
               "--quiet", "--log", log, "--backend", backend]
        exported = os.path.join(d, "trained.onnx")
        export = opt == "sgd" and backend == "native"
        if export:
            if os.path.exists(exported):
                os.remove(exported)
            cmd += ["--export", exported]
        t0 = time.time()
        rc, text = run(cmd, args.timeout)
        if rc != 0:
            tally.fail("%s: dlcc train exit %s: %s" % (label, rc, tail(text)))
        else:
            check_losses(tally, "%s (%.1f s)" % (label, time.time() - t0), read_log(log),
                         torch_losses, opt)
        if export:
            check_export(tally, args, model, exported)
    print("%d passed, %d failed" % (tally.passed, tally.failed))
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
