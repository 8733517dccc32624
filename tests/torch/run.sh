#!/usr/bin/env bash
# PyTorch parity tests: export models with torch, run them with dlcc, compare the outputs.
#
# usage: tests/torch/run.sh BUILD_DIR
#
# Exports (once) into BUILD_DIR/torch-models/<model>/ with tests/torch/export_models.py; a model
# is re-exported only when its folder is incomplete or export_models.py changed. Runs
# `BUILD_DIR/dlcc run` on each model, writing to BUILD_DIR/torch-runs/<model>/out (log in
# BUILD_DIR/torch-runs/<model>/dlcc.log), and compares with tests/torch/compare.py.
# Prints one line per model, `PASS name (max abs err X, time Ys)` or `FAIL name: reason`,
# then `N passed, N failed`. Exit status 1 on any failure, 2 on bad usage (no BUILD_DIR).
#
# Environment:
#   DLCC_TORCH_MODELS   models to run, space or comma separated
#                       (default: resnet50 mobilenet_v2 mobilenet_v2_bn conv_decoder bert_encoder
#                       bert_encoder_op17;
#                        e.g. DLCC_TORCH_MODELS="bert_encoder mobilenet_v2" for a sanitizer build)
#   DLCC_TORCH_PYTHON   python with torch, torchvision, onnx, numpy (default /usr/bin/python3)
#   DLCC_TORCH_TIMEOUT  seconds allowed per dlcc run (default 1800)
#   DLCC_BACKEND        backend for dlcc run: native (default) or ref
#   DLCC_ISA            instruction set of the native kernels (see README); the native backend
#                       also runs each model with --threads 1 and --threads 2 and requires
#                       bit-identical outputs (results must not depend on the thread count)
set -u

if [ $# -ne 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    [ $# -eq 1 ] && exit 0 || exit 2
fi

BUILD_DIR=$1
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${DLCC_TORCH_PYTHON:-/usr/bin/python3}
TIMEOUT=${DLCC_TORCH_TIMEOUT:-1800}
MODELS=${DLCC_TORCH_MODELS:-resnet50 mobilenet_v2 mobilenet_v2_bn conv_decoder bert_encoder bert_encoder_op17}
MODELS=${MODELS//,/ }
DLCC=$BUILD_DIR/dlcc
CACHE=$BUILD_DIR/torch-models
RUNS=$BUILD_DIR/torch-runs

passed=0
failed=0
pass() { echo "PASS $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}

# An unknown name in the selection counts as a failure (a typo must not pass silently).
known=
for m in $MODELS; do
    case $m in
        resnet50|mobilenet_v2|mobilenet_v2_bn|conv_decoder|bert_encoder|bert_encoder_op17) known="$known $m" ;;
        *) fail "$m: unknown model in DLCC_TORCH_MODELS (known: resnet50 mobilenet_v2 mobilenet_v2_bn conv_decoder bert_encoder bert_encoder_op17)" ;;
    esac
done
MODELS=$known

if [ ! -x "$DLCC" ]; then
    for m in $MODELS; do fail "$m: $DLCC not found (run make first)"; done
    finish
fi

if ! err=$("$PY" -c 'import torch, torchvision, onnx, numpy' 2>&1); then
    echo "run.sh: cannot import torch/torchvision/onnx/numpy with $PY; the PyTorch parity" \
         "tests cannot run (on Debian: apt-get install python3-torch python3-torchvision" \
         "python3-onnx python3-numpy). Error: $(printf '%s' "$err" | tail -n 1)"
    for m in $MODELS; do fail "$m: torch not importable with $PY"; done
    finish
fi

# Export what is missing. The stamp holds the exporter's checksum: a changed exporter
# invalidates the cache.
mkdir -p "$CACHE" "$RUNS"
stamp=$(cksum < "$HERE/export_models.py")
if [ "$(cat "$CACHE/.exporter-stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -f "$CACHE"/*/model.onnx
    printf '%s\n' "$stamp" > "$CACHE/.exporter-stamp"
fi
missing=
for m in $MODELS; do
    [ -f "$CACHE/$m/model.onnx" ] && [ -f "$CACHE/$m/manifest.json" ] || missing="$missing $m"
done
if [ -n "$missing" ]; then
    echo "exporting:$missing (into $CACHE)"
    # shellcheck disable=SC2086
    "$PY" "$HERE/export_models.py" "$CACHE" $missing > "$RUNS/export.log" 2>&1 ||
        { echo "run.sh: export failed for some models; see $RUNS/export.log:"; tail -n 5 "$RUNS/export.log"; }
fi

for m in $MODELS; do
    dir=$CACHE/$m
    if [ ! -f "$dir/model.onnx" ] || [ ! -f "$dir/manifest.json" ]; then
        fail "$m: export failed (see $RUNS/export.log)"
        continue
    fi
    # --input NAME=FILE for each graph input, from the manifest
    args=()
    while IFS= read -r line; do
        args+=(--input "$line")
    done < <("$PY" -c '
import json, os, sys
d = sys.argv[1]
for i in json.load(open(os.path.join(d, "manifest.json")))["inputs"]:
    print("%s=%s" % (i["name"], os.path.join(d, i["file"])))' "$dir")
    out=$RUNS/$m/out
    log=$RUNS/$m/dlcc.log
    rm -rf "$out"
    mkdir -p "$out"
    t0=$(date +%s.%N)
    timeout "$TIMEOUT" "$DLCC" run --backend "${DLCC_BACKEND:-native}" "$dir/model.onnx" "${args[@]}" --output-dir "$out" --quiet > "$log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    if [ $rc -eq 124 ]; then
        fail "$m: dlcc run timed out after ${TIMEOUT}s"
        continue
    fi
    if [ $rc -ne 0 ]; then
        reason=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)
        fail "$m: dlcc run exited $rc after ${secs}s: ${reason:-no message} (log: $log)"
        continue
    fi
    cmp=$("$PY" "$HERE/compare.py" "$dir" "$out" 2>&1)
    crc=$?
    printf '%s\n' "$cmp" > "$RUNS/$m/compare.log"
    err=$(printf '%s\n' "$cmp" | sed -n 's/^max_abs_err //p' | tail -n 1)
    same=yes
    if [ $crc -eq 0 ] && [ "${DLCC_BACKEND:-native}" = native ]; then
        for t in 1 2; do
            rm -rf "$out-t$t"
            mkdir -p "$out-t$t"
            timeout "$TIMEOUT" "$DLCC" run "$dir/model.onnx" "${args[@]}" --threads $t --output-dir "$out-t$t" --quiet >> "$log" 2>&1 || same="dlcc run --threads $t failed"
        done
        for f in "$out"-t1/*.npy; do
            [ "$same" = yes ] || break
            cmp -s "$f" "$out-t2/$(basename "$f")" || same="$(basename "$f") differs between --threads 1 and --threads 2"
        done
    fi
    if [ $crc -eq 0 ] && [ "$same" != yes ]; then
        fail "$m: $same"
    elif [ $crc -eq 0 ]; then
        pass "$m (max abs err ${err:-?}, time ${secs}s${DLCC_ISA:+, isa $DLCC_ISA}; identical at 1 and 2 threads)"
    else
        fail "$m: outputs differ from PyTorch (max abs err ${err:-?}, time ${secs}s):"
        printf '%s\n' "$cmp" | grep -v '^max_abs_err'
    fi
done
finish
