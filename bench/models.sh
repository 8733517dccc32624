#!/usr/bin/env bash
# Side-by-side model latency: dlcc vs ONNX Runtime (CPU) on the same machine, in the same run.
#
# usage: bench/models.sh [--models "resnet50 mobilenetv2 bert_base gpt2_small"] [--threads "1 2"]
#                        [--iters N] [--warmup N] [--rounds R] [--out FILE.jsonl] [--build DIR]
#                        [--models-dir DIR] [--check] [--math fp32|bf16]
#
# 1. Exports the models that are missing from the models dir (default bench/models/) with
#    bench/export_models.py (/usr/bin/python3, or $TORCH_PYTHON: torch, torchvision, onnx).
# 2. With --check, runs each model once with ORT and once with `dlcc run` on the same inputs and
#    prints the largest difference of the outputs (relative to the largest ORT value); a
#    difference above 1e-3 is flagged. Figures of a model that computes wrong are worth nothing.
# 3. For each model, each thread count and each of R rounds (default 1): `dlcc bench MODEL
#    --threads T --iters N --warmup W --json` and `bench/ort_bench.py MODEL --threads T --iters N
#    --warmup W` back to back, dlcc first in odd rounds and ORT first in even ones, so that the
#    machine's noise hits both alike. ORT: ORT_ENABLE_ALL, intra-op threads T, inter-op 1,
#    sequential. Each tool generates its own random inputs (valid token ids for both).
# 4. Prints a table: median ms of each (the median over rounds of the per-run medians), the
#    ratio dlcc/ORT (lower is better: < 1 means dlcc is faster), p90 (median over rounds) and
#    min (over all rounds) of each. Every measurement is appended as one JSON line to --out
#    (default bench/results/models-YYYYmmdd-HHMMSS.jsonl): the tool's JSON plus "name",
#    "runtime" ("dlcc" or "onnxruntime"), "round", "run" (this run's timestamp), "commit",
#    "loadavg" (1-minute load average when the measurement ended: > 0.5 means other work ran);
#    a failed measurement is a line with "error" instead of the figures.
#
# --math bf16 runs dlcc with mixed-precision products (dlcc bench/run --math bf16: MatMul, Gemm
# and the convolutions run as GEMMs with bfloat16 operands, float32 sums) against ORT in float32
# as always: a faster, less exact computation, not the same one. The check then flags a relative
# difference above 3e-2 (the products' operands keep 8 bits of mantissa of float32's 24: BERT
# 2e-3, GPT-2 8e-3), 1e-1 for the CNNs, where the rounding compounds over 50-odd layers
# (ResNet-50 4.4e-2, MobileNetV2 5.8e-2; PyTorch's own autocast bf16 differs from its float32 by
# 1.5e-1 and 8.9e-2 on them); the records say "math", and the table names it.
#
# Environment: PYTHON (python3 with onnxruntime and numpy; default python3), TORCH_PYTHON
# (default /usr/bin/python3). Defaults: --iters 20 --warmup 3 --threads "1 2".
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
TORCH_PY=${TORCH_PYTHON:-/usr/bin/python3}
MODELS="resnet50 mobilenetv2 bert_base gpt2_small"
THREADS="1 2"
ITERS=20
WARMUP=3
ROUNDS=1
BUILD=$ROOT/build
MODELS_DIR=$ROOT/bench/models
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=
CHECK=0
MATH=fp32

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
die() { echo "models.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        --models) MODELS=${2:?}; shift ;;
        --threads) THREADS=${2:?}; shift ;;
        --iters) ITERS=${2:?}; shift ;;
        --warmup) WARMUP=${2:?}; shift ;;
        --rounds) ROUNDS=${2:?}; shift ;;
        --out) OUT=${2:?}; shift ;;
        --build) BUILD=${2:?}; shift ;;
        --models-dir) MODELS_DIR=${2:?}; shift ;;
        --check) CHECK=1 ;;
        --math) MATH=${2:?}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option '$1'" ;;
    esac
    shift
done
for v in "$ITERS" "$WARMUP" "$ROUNDS" $THREADS; do
    case $v in ''|*[!0-9]*) die "--iters, --warmup, --rounds and --threads want numbers, got '$v'" ;; esac
done
if [ "$ROUNDS" -lt 1 ] || [ "$ITERS" -lt 1 ]; then die "--iters and --rounds must be >= 1"; fi
case $MATH in fp32) TOL=1e-3 ;; bf16) TOL=3e-2 ;; *) die "--math: fp32 or bf16, not '$MATH'" ;; esac
MODELS=${MODELS//,/ }
THREADS=${THREADS//,/ }
OUT=${OUT:-$ROOT/bench/results/models-$STAMP.jsonl}
mkdir -p "$(dirname "$OUT")" || die "cannot create the folder of $OUT"
DLCC=$BUILD/dlcc
[ -x "$DLCC" ] || die "$DLCC not found (run make first)"
"$PY" -c 'import onnxruntime, numpy' 2>/dev/null ||
    die "$PY cannot import onnxruntime and numpy (pip install onnxruntime; or set PYTHON)"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && COMMIT=$COMMIT-dirty
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT

# 1. Export what is missing.
missing=
for m in $MODELS; do [ -f "$MODELS_DIR/$m.onnx" ] || missing="$missing $m"; done
if [ -n "$missing" ]; then
    echo "exporting:$missing (into $MODELS_DIR)"
    # shellcheck disable=SC2086
    "$TORCH_PY" "$ROOT/bench/export_models.py" --out "$MODELS_DIR" $missing ||
        echo "models.sh: some exports failed; those models are skipped" >&2
fi

# 2. Optional correctness check on identical inputs.
if [ "$CHECK" -eq 1 ]; then
    for m in $MODELS; do
        f=$MODELS_DIR/$m.onnx d=$LOG/check-$m
        [ -f "$f" ] || continue
        if ! "$PY" "$ROOT/bench/ort_bench.py" "$f" --iters 1 --warmup 0 --save "$d" > /dev/null; then
            echo "check $m: ORT failed"; continue
        fi
        args=()
        while IFS= read -r line; do args+=(--input "$line"); done < "$d/inputs.txt"
        if ! "$DLCC" run "$f" "${args[@]}" --math "$MATH" --output-dir "$d/dlcc" --quiet \
                2> "$d/dlcc.log"; then
            echo "check $m: dlcc run failed: $(tail -n 1 "$d/dlcc.log")"; continue
        fi
        tol=$TOL
        # bf16 rounding compounds over the CNNs' 50-odd convolution layers (see above)
        case $MATH:$m in bf16:resnet50 | bf16:mobilenetv2) tol=1e-1 ;; esac
        "$PY" - "$m" "$d" "$tol" <<'EOF'
import glob, os, sys
import numpy as np
name, d, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
for f in sorted(glob.glob(os.path.join(d, "expected", "*.npy"))):
    out = os.path.basename(f)
    ref, got = np.load(f), os.path.join(d, "dlcc", out)
    if not os.path.exists(got):
        print("check %s %s: dlcc wrote no %s" % (name, out, got)); continue
    got = np.load(got)
    if got.shape != ref.shape:
        print("check %s %s: shape %s, ORT %s  WRONG" % (name, out, got.shape, ref.shape)); continue
    err = float(np.abs(got.astype(np.float64) - ref).max()) if ref.size else 0.0
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    rel = err / scale if scale > 0 else err
    print("check %s %s: max abs diff %.3g, max |ORT| %.3g, relative %.2g%s"
          % (name, out[:-4], err, scale, rel, "  WRONG" if not rel <= tol else ""))
EOF
    done
fi

# 3. Measurements, interleaved.
# record NAME RUNTIME ROUND THREADS LOGFILE JSONLINE: appends one line to $OUT.
record() {
    local load extra
    load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null)
    extra="\"name\":\"$1\",\"round\":$3,\"run\":\"$STAMP\",\"commit\":\"$COMMIT\",\"loadavg\":${load:-null}"
    [[ $6 == *'"runtime":'* ]] || extra="$extra,\"runtime\":\"$2\""
    [ "$2" = dlcc ] && extra="$extra,\"math\":\"$MATH\""
    if [[ $6 == \{*\} ]]; then
        echo "{$extra,${6#\{}" >> "$OUT"
    else
        local msg
        msg=$(tail -n 1 "$5" | tr -d "\"\\\\" | tr -c '[:print:]' ' ')
        echo "{$extra,\"threads\":$4,\"error\":\"${msg:-no JSON line on stdout}\"}" >> "$OUT"
        echo "  $2 $1 threads $4 round $3 failed: ${msg:-no JSON line on stdout}" >&2
    fi
}
run_dlcc() {
    local line
    line=$("$DLCC" bench "$1" --threads "$2" --iters "$ITERS" --warmup "$WARMUP" --math "$MATH" \
        --json 2> "$LOG/err" | grep '^{' | tail -n 1)
    record "$3" dlcc "$4" "$2" "$LOG/err" "$line"
}
run_ort() {
    local line
    line=$("$PY" "$ROOT/bench/ort_bench.py" "$1" --threads "$2" --iters "$ITERS" --warmup "$WARMUP" \
        2> "$LOG/err" | grep '^{' | tail -n 1)
    record "$3" onnxruntime "$4" "$2" "$LOG/err" "$line"
}
echo "measuring: models $MODELS; threads $THREADS; $ITERS iters after $WARMUP warm-up, $ROUNDS round(s);" \
    "load average $(cut -d' ' -f1 /proc/loadavg 2>/dev/null) on $(nproc 2>/dev/null) cores"
for m in $MODELS; do
    f=$MODELS_DIR/$m.onnx
    [ -f "$f" ] || { echo "  $m: $f missing, skipped" >&2; continue; }
    for t in $THREADS; do
        for r in $(seq "$ROUNDS"); do
            if [ $((r % 2)) -eq 1 ]; then
                run_dlcc "$f" "$t" "$m" "$r"; run_ort "$f" "$t" "$m" "$r"
            else
                run_ort "$f" "$t" "$m" "$r"; run_dlcc "$f" "$t" "$m" "$r"
            fi
        done
    done
done

# 4. The table, from this run's records.
"$PY" - "$OUT" "$STAMP" "$MATH" <<'EOF'
import json, statistics, sys
path, stamp, math = sys.argv[1], sys.argv[2], sys.argv[3]
recs = []
with open(path) as f:
    for line in f:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("run") == stamp:
            recs.append(r)
keys = []
for r in recs:
    if (r["name"], r["threads"]) not in keys:
        keys.append((r["name"], r["threads"]))
def agg(name, threads, runtime):
    rs = [r for r in recs if (r["name"], r["threads"], r["runtime"]) == (name, threads, runtime)
          and "median_ms" in r]
    if not rs:
        return None
    return (statistics.median(r["median_ms"] for r in rs),
            statistics.median(r["p90_ms"] for r in rs), min(r["min_ms"] for r in rs))
fmt = lambda x: "%.2f" % x if x is not None else "n/a"
hdr = ("model", "thr", "dlcc med", "ORT med", "dlcc/ORT", "dlcc p90", "ORT p90", "dlcc min", "ORT min")
print("\n%-12s %3s %10s %10s %9s %10s %10s %10s %10s" % hdr)
for name, threads in keys:
    d, o = agg(name, threads, "dlcc"), agg(name, threads, "onnxruntime")
    ratio = "%.2f" % (d[0] / o[0]) if d and o and o[0] > 0 else "n/a"
    print("%-12s %3d %10s %10s %9s %10s %10s %10s %10s" % (
        name, threads, fmt(d and d[0]), fmt(o and o[0]), ratio, fmt(d and d[1]), fmt(o and o[1]),
        fmt(d and d[2]), fmt(o and o[2])))
print("\nms per inference; dlcc/ORT < 1: dlcc faster.%s Records: %s"
      % (" dlcc with --math bf16 (bfloat16 products), ORT in float32." if math == "bf16" else "",
         path))
EOF
