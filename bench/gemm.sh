#!/usr/bin/env bash
# SGEMM side by side: dlcc's runtime GEMM (src/kernels/rt/gemm.c) vs OpenBLAS, one program.
#
# usage: bench/gemm.sh [--threads 1,2] [--time SEC] [--json] [--math bf16] [MxNxK ...]
#        (arguments go to bench/gemm_bench.c; see its header comment for what is measured)
#
# Compiles bench/gemm_bench.c together with the runtime GEMM source and its thread pool, with the
# flags dlcc's JIT compiles generated code with (-O3 -march=native -pthread -DDLRT_THREADS), into
# $BUILD/bench/gemm_bench (BUILD default build), and runs it. gemm.c and threads.c alone are tried
# first; if that does not link (it may come to need helpers from other runtime files) every
# src/kernels/rt/*.c is compiled in.
# Needs OpenBLAS with cblas.h (Debian: libopenblas-dev).
# Environment: CC (default cc), CFLAGS (default -O3 -march=native), BUILD.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CC=${CC:-cc}
CFLAGS=${CFLAGS:--O3 -march=native}
OUTDIR=${BUILD:-$ROOT/build}/bench
BIN=$OUTDIR/gemm_bench
mkdir -p "$OUTDIR" || exit 2
RT=$ROOT/src/kernels/rt
# shellcheck disable=SC2086
build() { $CC -std=c11 $CFLAGS -pthread -DDLRT_THREADS -Wall -Wextra -I"$RT" "$ROOT/bench/gemm_bench.c" \
    "$@" -lopenblas -lm -o "$BIN"; }
LOG=$OUTDIR/gemm_bench.log
if build "$RT/gemm.c" "$RT/threads.c" 2> "$LOG"; then
    cat "$LOG" >&2 # warnings, if any
elif build "$RT"/*.c 2> "$LOG.all"; then
    cat "$LOG.all" >&2
else
    cat "$LOG" "$LOG.all" >&2
    echo "gemm.sh: could not build $BIN (logs: $LOG, $LOG.all)" >&2
    exit 2
fi
exec "$BIN" "$@"
