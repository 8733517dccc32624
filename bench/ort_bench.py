#!/usr/bin/env python3
"""Time one ONNX model with ONNX Runtime (CPU) at a given intra-op thread count.

Run with the `python3` on PATH that has onnxruntime and numpy (`pip install onnxruntime`);
the onnx package is not needed.

usage: python3 bench/ort_bench.py MODEL.onnx [--threads N] [--iters N] [--warmup N] [--vocab N]
                                 [--save DIR]

Session: graph_optimization_level ORT_ENABLE_ALL, intra_op_num_threads N, inter_op_num_threads 1,
execution_mode ORT_SEQUENTIAL, CPUExecutionProvider (ORT's default spin-waiting left on).
Inputs, generated once (seed 0): float inputs uniform in [-1, 1); integer inputs whose name
contains "mask" all ones; other integer inputs (token ids) uniform in [0, V), V the row count of
the table a Gather reads them from (found by scanning the model file), or --vocab, or 10
(dlcc run's range) when neither applies. Symbolic dims are taken as 1.
`warmup` untimed runs, then `iters` timed ones (wall clock around session.run).

Prints ONE JSON line on stdout, the fields of `dlcc bench --json` plus the runtime's name:
{"model":PATH,"threads":N,"iters":N,"warmup":N,"median_ms":X,"p90_ms":X,"min_ms":X,"mean_ms":X,
 "compile_ms":X,"runtime":"onnxruntime","version":"1.x"}
compile_ms is the InferenceSession construction (load + graph optimization). p90 is the
nearest-rank 90th percentile.
--save DIR also writes the inputs to DIR/inputs/<input>.npy (and DIR/inputs.txt, one
NAME=FILE line per input, the form of `dlcc run --input`) and ORT's outputs to
DIR/expected/<output>.npy (names with characters outside [A-Za-z0-9._-] turned into '_', as
`dlcc run --output-dir` names its files), for comparing dlcc's outputs (bench/models.sh --check).
"""
import argparse
import json
import math
import mmap
import os
import re
import sys
import time

import numpy as np
import onnxruntime as ort


# ----------------------------------------------------------------------------------------------
# Just enough of the protobuf wire format to find, in an ONNX ModelProto, which graph inputs are
# Gather indices and how many rows the gathered initializer has (so that token ids are valid).

def pb_varint(buf, i):
    """(value, next offset) of the varint at buf[i]."""
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, i


def pb_fields(buf, start, end):
    """Yields (field number, wire type, value) of one message; value is an int for varints and
    fixed-width fields, a (start, end) span for length-delimited ones."""
    i = start
    while i < end:
        key, i = pb_varint(buf, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = pb_varint(buf, i)
        elif wt == 1:
            v, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wt == 5:
            v, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        elif wt == 2:
            n, i = pb_varint(buf, i)
            v, i = (i, i + n), i + n
        else:
            raise ValueError("unsupported protobuf wire type %d" % wt)
        yield field, wt, v


def pb_str(buf, span):
    return bytes(buf[span[0]:span[1]]).decode("utf-8", "replace")


def pb_varints(buf, span):
    """A packed repeated varint field."""
    vals, i = [], span[0]
    while i < span[1]:
        v, i = pb_varint(buf, i)
        vals.append(v)
    return vals


def gather_bounds(path):
    """{graph input name: rows of the initializer a Gather indexes with it}, best effort."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        graph = next((v for fn, wt, v in pb_fields(buf, 0, len(buf)) if fn == 7 and wt == 2), None)
        if graph is None:
            return {}
        init_dims, gathers = {}, []
        for fn, wt, v in pb_fields(buf, *graph):
            if fn == 5 and wt == 2:            # TensorProto initializer: dims = 1, name = 8
                name, dims = None, []
                for tf, twt, tv in pb_fields(buf, *v):
                    if tf == 1:
                        dims += pb_varints(buf, tv) if twt == 2 else [tv]
                    elif tf == 8:
                        name = pb_str(buf, tv)
                init_dims[name] = dims
            elif fn == 1 and wt == 2:          # NodeProto: input = 1, op_type = 4, attribute = 5
                inputs, op, axis = [], None, 0
                for nf, nwt, nv in pb_fields(buf, *v):
                    if nf == 1:
                        inputs.append(pb_str(buf, nv))
                    elif nf == 4:
                        op = pb_str(buf, nv)
                    elif nf == 5:              # AttributeProto: name = 1, i = 3
                        attr = dict((af, av) for af, _, av in pb_fields(buf, *nv))
                        if 1 in attr and pb_str(buf, attr[1]) == "axis" and 3 in attr:
                            axis = attr[3] - (1 << 64) if attr[3] >= 1 << 63 else attr[3]
                if op == "Gather" and len(inputs) >= 2:
                    gathers.append((inputs[0], inputs[1], axis))
        bounds = {}
        for data, idx, axis in gathers:
            dims = init_dims.get(data)
            if dims and -len(dims) <= axis < len(dims):
                rows = dims[axis]
                bounds[idx] = min(bounds.get(idx, rows), rows)
        return bounds


# ----------------------------------------------------------------------------------------------

NP_TYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
}


def make_inputs(sess, path, vocab):
    rng = np.random.default_rng(0)
    bounds = None
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in i.shape]
        dt = NP_TYPES.get(i.type)
        if dt is None:
            raise SystemExit("ort_bench.py: input %s has unsupported type %s" % (i.name, i.type))
        if np.issubdtype(dt, np.floating):
            feeds[i.name] = rng.uniform(-1, 1, shape).astype(dt)
        elif dt == np.bool_ or "mask" in i.name.lower():
            feeds[i.name] = np.ones(shape, dt)
        else:
            if vocab is None:
                if bounds is None:
                    try:
                        bounds = gather_bounds(path)
                    except (ValueError, IndexError, OSError) as e:
                        print("ort_bench.py: cannot scan %s for Gather bounds (%s); ids in [0, 10)"
                              % (path, e), file=sys.stderr)
                        bounds = {}
                hi = bounds.get(i.name, 10)
            else:
                hi = vocab
            feeds[i.name] = rng.integers(0, max(1, hi), shape).astype(dt)
    return feeds


def save(sess, feeds, out_dir):
    sanitize = lambda name: re.sub(r"[^A-Za-z0-9._-]", "_", name)
    os.makedirs(os.path.join(out_dir, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(out_dir, "expected"), exist_ok=True)
    with open(os.path.join(out_dir, "inputs.txt"), "w") as f:
        for name, value in feeds.items():
            path = os.path.join(out_dir, "inputs", sanitize(name) + ".npy")
            np.save(path, value)
            f.write("%s=%s\n" % (name, path))
    for o, value in zip(sess.get_outputs(), sess.run(None, feeds)):
        np.save(os.path.join(out_dir, "expected", sanitize(o.name) + ".npy"), value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    ap.add_argument("--iters", type=int, default=20, help="timed runs (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    ap.add_argument("--vocab", type=int, help="token ids uniform in [0, VOCAB) for integer inputs")
    ap.add_argument("--save", metavar="DIR", help="write inputs and ORT outputs as .npy under DIR")
    ap.add_argument("--json", action="store_true", help="accepted for symmetry with dlcc bench "
                    "(the output is always one JSON line)")
    args = ap.parse_args()
    if args.threads < 1 or args.iters < 1 or args.warmup < 0:
        ap.error("--threads and --iters must be >= 1, --warmup >= 0")

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    t0 = time.perf_counter()
    sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    compile_ms = (time.perf_counter() - t0) * 1e3

    feeds = make_inputs(sess, args.model, args.vocab)
    if args.save:
        save(sess, feeds, args.save)
    for _ in range(args.warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    n = len(times)
    median = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
    p90 = times[max(0, math.ceil(0.9 * n) - 1)]
    r = lambda x: round(x, 3)
    print(json.dumps({"model": args.model, "threads": args.threads, "iters": args.iters,
                      "warmup": args.warmup, "median_ms": r(median), "p90_ms": r(p90),
                      "min_ms": r(times[0]), "mean_ms": r(sum(times) / n),
                      "compile_ms": r(compile_ms), "runtime": "onnxruntime",
                      "version": ort.__version__}, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
