#!/usr/bin/env bash
# Compile-time benchmark: for each PyTorch-exported model (tests/torch, exported once into
# BUILD/torch-models), `dlcc compile --cold-warm --report`: a cold compile into an empty
# temporary cache and a warm one (cache hit), plus node counts, kernels and the memory plan.
# Medians over REPEAT runs (default 3). Figures only; nothing here is asserted.
# usage: bench/compile.sh [BUILD_DIR]        (run `make test` or tests/torch/run.sh first)
set -u
BUILD=${1:-build}
REPEAT=${REPEAT:-3}
MODELS=${MODELS:-resnet50 mobilenet_v2 mobilenet_v2_bn bert_encoder}
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
printf "%-18s %10s %10s  %s\n" model "cold ms" "warm ms" "report"
for m in $MODELS; do
    f=$BUILD/torch-models/$m/model.onnx
    [ -f "$f" ] || { echo "$m: $f missing (run tests/torch/run.sh $BUILD)"; continue; }
    cold=() warm=()
    for _ in $(seq "$REPEAT"); do
        line=$("$BUILD/dlcc" compile "$f" --cold-warm | grep '^compile: cold')
        cold+=("$(echo "$line" | sed -E 's/.*cold ([0-9.]+) ms.*/\1/')")
        warm+=("$(echo "$line" | sed -E 's/.*warm \(cache hit\) ([0-9.]+) ms.*/\1/')")
    done
    c=$(printf "%s\n" "${cold[@]}" | median)
    w=$(printf "%s\n" "${warm[@]}" | median)
    printf "%-18s %10s %10s\n" "$m" "$c" "$w"
    DLCC_CACHE_DIR=$(mktemp -d) "$BUILD/dlcc" compile "$f" --report | sed 's/^/    /'
done
