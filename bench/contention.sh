#!/usr/bin/env bash
# Model latency at 2 threads while another process shares one of the cores: dlcc vs ONNX
# Runtime, in the same run, under the same competitor.
#
# usage: bench/contention.sh [--models "resnet50 mobilenetv2"] [--loads "none 0.2/0.6 2/6 busy"]
#                            [--iters N] [--rounds R] [--build DIR] [--core C]
#
# A load BUSY/IDLE runs bench/burst.c (built into BUILD/bench/burst) pinned to core C (default:
# the last one): busy BUSY ms, asleep IDLE ms, over and over; "busy" never sleeps (an
# equal-priority busy loop); "none" runs no competitor. For each model, load and round: `dlcc
# bench MODEL --threads 2 --iters N --json` and bench/ort_bench.py at 2 intra-op threads, each
# under a competitor of its own started just before it. Prints the median ms of each (median over
# rounds) and the ratio dlcc/ORT. Defaults: --iters 40 --rounds 2; models as bench/models.sh
# exports them (run it first). Environment: PYTHON (python3 with onnxruntime; default python3).
#
# Why: a thread pool that gives each thread a fixed share waits, at every parallel step, for
# the thread whose core is shared. Timings here are not tests: the machine's own noise adds to
# the competitor's.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
MODELS="resnet50 mobilenetv2"
LOADS="none 0.2/0.6 2/6 busy"
ITERS=40
ROUNDS=2
BUILD=$ROOT/build
CORE=$(( $(nproc) - 1 ))
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
die() { echo "contention.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        --models) MODELS=${2:?}; shift ;;
        --loads) LOADS=${2:?}; shift ;;
        --iters) ITERS=${2:?}; shift ;;
        --rounds) ROUNDS=${2:?}; shift ;;
        --build) BUILD=${2:?}; shift ;;
        --core) CORE=${2:?}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option '$1'" ;;
    esac
    shift
done
for v in "$ITERS" "$ROUNDS" "$CORE"; do
    case $v in ''|*[!0-9]*) die "--iters, --rounds and --core want numbers, got '$v'" ;; esac
done
[ "$(nproc)" -ge 2 ] || die "needs two cores or more"
DLCC=$BUILD/dlcc
[ -x "$DLCC" ] || die "$DLCC not found (run make first)"
"$PY" -c 'import onnxruntime, numpy' 2>/dev/null || die "$PY cannot import onnxruntime and numpy"
command -v taskset > /dev/null || die "taskset not found (util-linux)"
BURST=$BUILD/bench/burst
mkdir -p "$BUILD/bench"
if [ ! -x "$BURST" ] || [ "$ROOT/bench/burst.c" -nt "$BURST" ]; then
    ${CC:-cc} -O2 -std=c11 -Wall -Wextra -o "$BURST" "$ROOT/bench/burst.c" || die "cannot build $BURST"
fi
for l in $LOADS; do
    case $l in none|busy) ;; */*) ;; *) die "--loads: none, busy or BUSY/IDLE (ms), not '$l'" ;; esac
done

COMP=
start_competitor() { # $1: load; secs long enough for one measurement
    COMP=
    case $1 in
        none) return ;;
        busy) taskset -c "$CORE" "$BURST" 5 0 600 & ;;
        *) taskset -c "$CORE" "$BURST" "${1%/*}" "${1#*/}" 600 & ;;
    esac
    COMP=$!
    sleep 0.2
}
stop_competitor() { [ -n "$COMP" ] && kill "$COMP" 2> /dev/null && wait "$COMP" 2> /dev/null; COMP=; }
trap stop_competitor EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
field() { sed -n "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/p"; }

printf '%-12s %-8s %10s %10s %9s\n' model load "dlcc med" "ORT med" dlcc/ORT
for m in $MODELS; do
    f=$ROOT/bench/models/$m.onnx
    [ -f "$f" ] || { echo "$m: $f missing (run bench/models.sh first)"; continue; }
    for l in $LOADS; do
        d=() o=()
        for r in $(seq "$ROUNDS"); do
            start_competitor "$l"
            d+=("$("$DLCC" bench "$f" --threads 2 --iters "$ITERS" --json 2> /dev/null | field median_ms)")
            stop_competitor
            start_competitor "$l"
            o+=("$("$PY" "$ROOT/bench/ort_bench.py" "$f" --threads 2 --iters "$ITERS" 2> /dev/null | field median_ms)")
            stop_competitor
        done
        dm=$(printf '%s\n' "${d[@]}" | grep . | median)
        om=$(printf '%s\n' "${o[@]}" | grep . | median)
        ratio=$(awk -v a="$dm" -v b="$om" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')
        printf '%-12s %-8s %10s %10s %9s\n' "$m" "$l" "${dm:--}" "${om:--}" "$ratio"
    done
done
