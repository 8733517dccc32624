#!/usr/bin/env bash
# Train a small CNN on scikit-learn's 8x8 handwritten digits with `dlcc train`, end to end.
#
# usage: examples/digits/train.sh [BUILD_DIR [WORK_DIR]]    (defaults: build, BUILD_DIR/digits)
#
# 1. make_data.py writes WORK_DIR/X.npy, Y.npy (1797 digits, shuffled once; the last 10% is the
#    validation set) and model.py writes WORK_DIR/model.onnx (random init), both with
#    DLCC_TORCH_PYTHON (default /usr/bin/python3: Debian's torch 1.13, onnx, scikit-learn).
# 2. BUILD_DIR/dlcc train: cross-entropy, AdamW lr 3e-3, batch 32, 30 epochs, --val-split 0.1,
#    --seed 1; the log of every step goes to WORK_DIR/train.jsonl, what dlcc prints to
#    WORK_DIR/train.out and the trained model to WORK_DIR/trained.onnx. DLCC_DIGITS_MATH=bf16
#    trains with --math bf16 (mixed precision: the Gemm products and the convolutions run as
#    GEMMs, forward and backward, in bfloat16).
# 3. Checks the last "val_acc=" dlcc printed (its per-epoch line
#    "epoch E/N train_loss=X val_loss=Y val_acc=Z") is at least 0.97. PyTorch reaches 98.9-100%
#    (mean 99.4%) with these settings over 16 shuffling seeds, so below 97% is a bug, not luck.
# Prints "PASS digits val_acc=..." or "FAIL digits ...", then "N passed, N failed" (the test
# suite's summary line); exit status 0 or 1 (2: bad usage).
set -u -o pipefail

if [ $# -gt 2 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    [ $# -le 2 ] && exit 0 || exit 2
fi

HERE=$(cd "$(dirname "$0")" && pwd)
BUILD_DIR=${1:-$HERE/../../build}
WORK=${2:-$BUILD_DIR/digits}
PY=${DLCC_TORCH_PYTHON:-/usr/bin/python3}
MIN_ACC=0.97
case $BUILD_DIR in
    /*) cache_default=$BUILD_DIR/cache ;;
    *) cache_default=$PWD/$BUILD_DIR/cache ;;
esac
export DLCC_CACHE_DIR=${DLCC_CACHE_DIR:-$cache_default}

fail() { echo "FAIL digits$*"; echo "0 passed, 1 failed"; exit 1; }

mkdir -p "$WORK" || fail ": cannot create $WORK"
"$PY" "$HERE/make_data.py" "$WORK" || fail ": make_data.py"
"$PY" "$HERE/model.py" "$WORK" || fail ": model.py"

"$BUILD_DIR/dlcc" train "$WORK/model.onnx" --x "$WORK/X.npy" --y "$WORK/Y.npy" \
    --loss cross_entropy --optimizer adamw --lr 3e-3 --batch 32 --epochs 30 \
    --val-split 0.1 --seed 1 --log "$WORK/train.jsonl" --export "$WORK/trained.onnx" \
    --math "${DLCC_DIGITS_MATH:-fp32}" \
    2>&1 | tee "$WORK/train.out"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || fail ": dlcc train exit $rc"

acc=$(grep -o 'val_acc=[0-9.eE+-]*' "$WORK/train.out" | tail -1 | cut -d= -f2)
[ -n "$acc" ] || fail ": dlcc printed no val_acc= (output in $WORK/train.out)"
if ! awk -v a="$acc" -v m="$MIN_ACC" 'BEGIN { exit !(a + 0 >= m + 0 && a + 0 <= 1) }'; then
    fail " val_acc=$acc (want >= $MIN_ACC)"
fi
echo "PASS digits (--math ${DLCC_DIGITS_MATH:-fp32}) val_acc=$acc (>= $MIN_ACC)"
echo "1 passed, 0 failed"
