#!/usr/bin/env bash
# Training step time: `dlcc train` against PyTorch eager on the same models, data and optimizer.
#
# usage: bench/train.sh [--threads N] [--steps N] [--models "mlp lenet gpt"] [--build DIR]
#                       [--models-dir DIR] [--math fp32|bf16]
#
#   --threads N     threads for both (default 1): torch.set_num_threads and OpenBLAS's threads
#                   (bench/train_torch.py), dlcc --threads
#   --steps N       training steps per model (default 30); the first 3 are warm-up, not counted
#   --models LIST   of bench/train_models.py's models (default: mlp lenet gpt)
#   --build DIR     where dlcc is (default build)
#   --models-dir D  exported models (default bench/models/train); missing ones are exported with
#                   bench/train_models.py
#   --math M        fp32 (default) or bf16: dlcc train --math bf16 (mixed precision: the step's
#                   MatMul and Gemm products with bfloat16 operands, float32 sums), timed against
#                   PyTorch twice: in float32 as always, and with its own mixed precision
#                   (train_torch.py --math bf16: torch.autocast on the CPU, bfloat16); the table
#                   then has both peers and both ratios
#
# Per model: bench/train_torch.py (median step time after the warm-up) and
#   dlcc train MODEL --x X.npy --y Y.npy --loss cross_entropy --optimizer ... --batch B
#        --steps N --val-split 0 --threads T --quiet --log FILE
# (median of the log's "ms" after the warm-up), with the batch size and optimizer of the
# model's train.json (mlp: batch 128, lenet: 64, SGD lr 0.01 momentum 0.9; gpt: batch 8 of 128
# tokens, AdamW lr 3e-4). Prints a table: model, torch ms, dlcc ms, dlcc/torch (< 1: dlcc is
# faster). A runtime that fails on a model is reported with its error and "n/a".
# Python: DLCC_TORCH_PYTHON (default /usr/bin/python3: Debian's torch 1.13, onnx, numpy).
# Debian's torch does its matrix products in the system BLAS (libblas.so.3): torch must run them
# on OpenBLAS or MKL (bench/train_torch.py --check-blas), and OpenBLAS is installed where it is
# missing (libopenblas0-pthread; as root, else an error), since the reference BLAS it would
# otherwise get is 30-50x slower. On a CPU with AVX-512 (F, BW, DQ, VL), OPENBLAS_CORETYPE
# defaults to SkylakeX: Debian 12's OpenBLAS 0.3.21 does not know Zen 4 or 5 and runs its AVX2
# kernels there (torch's 1024 matmul on one thread 18.2 ms, 11.3 with SkylakeX's), and the peer
# gets its best; a value already set is kept (the last line printed names the core used). At 2
# threads or more torch's own OpenMP threads spin while OpenBLAS's work, on the same cores: its
# figures there are not a fair peer (GPT 367 ms a step at 2 threads, 123 at one;
# OMP_WAIT_POLICY=PASSIVE gave 103, but LeNet's convolutions 2.0 -> 3.9 ms).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1

THREADS=1
STEPS=30
WARMUP=3
MODELS="mlp lenet gpt"
BUILD=build
MODELS_DIR=bench/models/train
MATH=fp32
PY=${DLCC_TORCH_PYTHON:-/usr/bin/python3}

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit "$1"; }
while [ $# -gt 0 ]; do
    case $1 in
        --threads) THREADS=${2:?}; shift 2 ;;
        --steps) STEPS=${2:?}; shift 2 ;;
        --models) MODELS=${2//,/ }; shift 2 ;;
        --build) BUILD=${2:?}; shift 2 ;;
        --models-dir) MODELS_DIR=${2:?}; shift 2 ;;
        --math) MATH=${2:?}; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "bench/train.sh: unknown option $1" >&2; usage 2 ;;
    esac
done
case $MATH in fp32 | bf16) ;; *) echo "bench/train.sh: --math: fp32 or bf16, not $MATH" >&2; exit 2 ;; esac
if [ "$STEPS" -le "$WARMUP" ]; then
    echo "bench/train.sh: --steps must be larger than $WARMUP" >&2
    exit 2
fi
# SkylakeX's kernels need AVX-512 F, BW, DQ and VL (Knights Landing has F alone)
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ "$(grep -m1 '^flags' /proc/cpuinfo |
        grep -ow -e avx512f -e avx512bw -e avx512dq -e avx512vl | sort -u | wc -l)" = 4 ]; then
    export OPENBLAS_CORETYPE=SkylakeX
fi
# the BLAS torch calls (train_torch.py --check-blas, exit 3: neither OpenBLAS nor MKL); as root,
# OpenBLAS is installed where its package is missing, and checked again
if ! "$PY" bench/train_torch.py --check-blas >/dev/null 2>/tmp/dlcc-train-blas.$$; then
    if [ "$(id -u)" = 0 ] && ! dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null |
            grep -q "ok installed"; then
        echo "installing OpenBLAS (libopenblas0-pthread) for torch"
        export DEBIAN_FRONTEND=noninteractive
        { apt-get update -q && apt-get install -y -q --no-install-recommends \
            libopenblas0-pthread; } >/tmp/dlcc-train-apt.$$ 2>&1 ||
            { tail -5 /tmp/dlcc-train-apt.$$ >&2; rm -f /tmp/dlcc-train-*.$$; exit 2; }
    fi
    if ! "$PY" bench/train_torch.py --check-blas >/dev/null 2>/tmp/dlcc-train-blas.$$; then
        cat /tmp/dlcc-train-blas.$$ >&2
        rm -f /tmp/dlcc-train-*.$$
        exit 2
    fi
fi
rm -f /tmp/dlcc-train-*.$$
case $BUILD in /*) cache_default=$BUILD/cache ;; *) cache_default=$PWD/$BUILD/cache ;; esac
export DLCC_CACHE_DIR=${DLCC_CACHE_DIR:-$cache_default}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlcc-train-bench.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT

for m in $MODELS; do
    if [ ! -f "$MODELS_DIR/$m/train.json" ] || [ ! -f "$MODELS_DIR/$m/model.onnx" ]; then
        "$PY" bench/train_models.py "$MODELS_DIR" "$m" || exit 1
    fi
done

# field FILE KEY: KEY of the JSON object in FILE (one line), empty when absent.
field() {
    "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
v = d.get(sys.argv[2])
print("" if v is None else v)' "$1" "$2" 2>/dev/null
}

# median_log FILE: median "ms" of the step records after the warm-up, empty when too few.
median_log() {
    "$PY" -c 'import json, sys
ms = [json.loads(l)["ms"] for l in open(sys.argv[1]) if l.strip()][int(sys.argv[2]):]
ms = [r for r in ms if isinstance(r, (int, float))]
if ms:
    ms.sort()
    n = len(ms)
    print("%.3f" % (ms[n // 2] if n % 2 else (ms[n // 2 - 1] + ms[n // 2]) / 2))' "$1" "$WARMUP" \
        2>/dev/null
}

declare -A TORCH_MS TORCH16_MS DLCC_MS
for m in $MODELS; do
    # Torch, one model per process: a model that fails does not take the others with it.
    if "$PY" bench/train_torch.py "$MODELS_DIR" --threads "$THREADS" --steps "$STEPS" \
            --warmup "$WARMUP" --models "$m" >"$WORK/$m.torch.json" 2>"$WORK/$m.torch.err"; then
        TORCH_MS[$m]=$(field "$WORK/$m.torch.json" median_ms)
    else
        echo "torch failed on $m: $(tail -1 "$WORK/$m.torch.err")"
    fi
    if [ "$MATH" = bf16 ]; then
        if "$PY" bench/train_torch.py "$MODELS_DIR" --threads "$THREADS" --steps "$STEPS" \
                --warmup "$WARMUP" --models "$m" --math bf16 >"$WORK/$m.torch16.json" \
                2>"$WORK/$m.torch16.err"; then
            TORCH16_MS[$m]=$(field "$WORK/$m.torch16.json" median_ms)
        else
            echo "torch (autocast bf16) failed on $m: $(tail -1 "$WORK/$m.torch16.err")"
        fi
    fi

    cfg=$MODELS_DIR/$m/train.json
    opt=$(field "$cfg" optimizer)
    args=(--optimizer "$opt" --lr "$(field "$cfg" lr)" --weight-decay "$(field "$cfg" weight_decay)"
          --batch "$(field "$cfg" batch)")
    [ "$opt" = sgd ] && args+=(--momentum "$(field "$cfg" momentum)")
    if "$BUILD/dlcc" train "$MODELS_DIR/$m/model.onnx" --x "$MODELS_DIR/$m/X.npy" \
            --y "$MODELS_DIR/$m/Y.npy" --loss cross_entropy "${args[@]}" --steps "$STEPS" \
            --val-split 0 --threads "$THREADS" --math "$MATH" --quiet --log "$WORK/$m.jsonl" \
            >"$WORK/$m.dlcc.out" 2>&1; then
        DLCC_MS[$m]=$(median_log "$WORK/$m.jsonl")
        [ -n "${DLCC_MS[$m]}" ] || echo "dlcc wrote no step times for $m"
    else
        echo "dlcc failed on $m: $(grep -v '^\s*$' "$WORK/$m.dlcc.out" | tail -3 | tr '\n' ' ')"
    fi
done

# ratio A B: A / B to two places, n/a when either is missing.
ratio() {
    if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; else echo n/a; fi
}

echo
echo "training step, median ms after $WARMUP warm-up steps of $STEPS, $THREADS thread(s)," \
    "dlcc --math $MATH"
if [ "$MATH" = bf16 ]; then
    printf '%-8s %12s %14s %12s %12s %14s\n' model torch_ms torch_bf16_ms dlcc_ms dlcc/torch \
        dlcc/torch_bf16
else
    printf '%-8s %12s %12s %12s\n' model torch_ms dlcc_ms dlcc/torch
fi
for m in $MODELS; do
    t=${TORCH_MS[$m]:-}
    t16=${TORCH16_MS[$m]:-}
    d=${DLCC_MS[$m]:-}
    if [ "$MATH" = bf16 ]; then
        printf '%-8s %12s %14s %12s %12s %14s\n' "$m" "${t:-n/a}" "${t16:-n/a}" "${d:-n/a}" \
            "$(ratio "$d" "$t")" "$(ratio "$d" "$t16")"
    else
        printf '%-8s %12s %12s %12s\n' "$m" "${t:-n/a}" "${d:-n/a}" "$(ratio "$d" "$t")"
    fi
done
for m in $MODELS; do # the BLAS torch ran on, as train_torch.py found it
    blas=$(field "$WORK/$m.torch.json" blas)
    [ -n "$blas" ] || continue
    echo "torch's BLAS: $blas (core $(field "$WORK/$m.torch.json" blas_core)," \
        "$(field "$WORK/$m.torch.json" blas_threads) thread(s))"
    break
done
