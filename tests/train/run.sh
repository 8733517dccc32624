#!/usr/bin/env bash
# Training parity: `dlcc train` against PyTorch, step by step: a small MLP, CNN and GPT.
#
# usage: tests/train/run.sh BUILD_DIR
#
# Exports the models, data and torch's per-step losses into a temporary folder
# (tests/train/export_models.py, with DLCC_TORCH_PYTHON, default /usr/bin/python3: Debian's torch
# 1.13, onnx, numpy), then runs tests/train/parity.py with BUILD_DIR/dlcc: 20 steps per model
# with each of five optimizer settings (SGD, SGD Nesterov + weight decay, Adam, AdamW twice; MLP
# and GPT on the native and ref backends, CNN on native), each step's loss within 1e-4 relative
# of torch's, and the model --export'ed after SGD checked parameter by parameter against torch's,
# with onnx.checker, with `dlcc run` and, when the python3 on PATH imports onnxruntime, with
# onnxruntime. About 15 s with a warm compile cache (BUILD_DIR/cache), 30 s cold.
# Prints "PASS ..." / "FAIL ..." lines and "N passed, N failed"; exit status 1 on any failure,
# 2 on bad usage. DLCC_TRAIN_KEEP=1 keeps the temporary folder (its path is printed).
set -u

if [ $# -ne 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    [ $# -eq 1 ] && exit 0 || exit 2
fi

BUILD_DIR=$1
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${DLCC_TORCH_PYTHON:-/usr/bin/python3}
case $BUILD_DIR in
    /*) cache_default=$BUILD_DIR/cache ;;
    *) cache_default=$PWD/$BUILD_DIR/cache ;;
esac
export DLCC_CACHE_DIR=${DLCC_CACHE_DIR:-$cache_default}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlcc-train.XXXXXX") || exit 1
if [ "${DLCC_TRAIN_KEEP:-0}" = 1 ]; then
    echo "keeping $WORK"
else
    trap 'rm -rf "$WORK"' EXIT
fi

if ! "$PY" "$HERE/export_models.py" "$WORK" >"$WORK/export.log" 2>&1; then
    echo "FAIL export_models.py with $PY:"
    tail -5 "$WORK/export.log" | sed 's/^/    /'
    echo "0 passed, 1 failed"
    exit 1
fi

ort=()
if command -v python3 >/dev/null 2>&1 && python3 -c "import onnxruntime, numpy" 2>/dev/null; then
    ort=(--ort-python "$(command -v python3)")
fi

"$PY" "$HERE/parity.py" "$WORK" "$BUILD_DIR/dlcc" ${ort[@]+"${ort[@]}"}
