#!/usr/bin/env bash
# tests/robust/run.sh BUILD_DIR — robustness tests of the dlcc command-line tool.
#
# Feeds BUILD_DIR/dlcc missing, malformed, truncated and byte-flipped models, malformed graphs
# (unknown op, undefined input, cycle, shape mismatches, huge shapes, bad initializers, external
# data escaping the model folder) and malformed --input files, and checks that each one:
#   - exits with 1 (2 is also accepted for usage errors), never by a signal (exit code < 128);
#   - prints exactly one line 'dlcc: error: ...' on stderr ('dlcc: warning:' lines are allowed
#     too), with no AddressSanitizer / UndefinedBehaviorSanitizer / LeakSanitizer report;
#   - finishes within 60 s (timeout 60).
# Truncated and byte-flipped copies may also exit 0 (a flip can leave a valid model) but must not
# crash, hang or trigger a sanitizer. The models are generated at test time by gen_models.py
# (/usr/bin/python3 with onnx and numpy) into a temporary folder, from a fixed seed.
#
# Works with the normal build (make → build/) and the sanitizer build (make test-asan →
# build-asan/). Each check prints 'PASS what' or 'FAIL what: why'; the last line is
# 'N passed, N failed' and the exit status is non-zero when anything failed.
#
# Environment: ROBUST_SEED (default 1234), ROBUST_CUTS (cut points per model, default 20),
# ROBUST_FLIPS (byte-flipped copies in all, default 200), ROBUST_KEEP=1 keeps the temp folder,
# PYTHON (default /usr/bin/python3).
set -u

BUILD_DIR=${1:-build}
DLCC=$BUILD_DIR/dlcc
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
SEED=${ROBUST_SEED:-1234}
TIMEOUT=60

if [[ ! -x $DLCC ]]; then
    echo "FAIL setup: $DLCC is not an executable (build it first)"
    echo "0 passed, 1 failed"
    exit 1
fi
DLCC=$(cd "$(dirname "$DLCC")" && pwd)/dlcc

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlcc-robust.XXXXXX")
if [[ ${ROBUST_KEEP:-0} != 1 ]]; then trap 'rm -rf "$TMP"' EXIT; else echo "keeping $TMP"; fi

# Sanitizer builds: make huge allocations fail (malloc returns NULL) instead of aborting, so the
# tool's own out-of-memory path is what gets tested. Normal builds: cap the address space so a
# model that asks for a huge buffer cannot take the machine down (ASan cannot run under ulimit -v).
SANITIZED=0
if [[ ${DLCC_SANITIZED:-0} == 1 ]] || grep -q -e __asan_init -e __ubsan_handle "$DLCC" 2>/dev/null; then
    SANITIZED=1
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1:max_allocation_size_mb=6144:detect_leaks=1"
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1"
fi

PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "PASS $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL $1: $2"; }

# run_dlcc ARGS... — runs dlcc with a timeout; sets RC, OUT (stdout file), ERR (stderr file).
# (The outer 2>/dev/null only hides bash's own "Segmentation fault" job notice.)
N_RUN=0
run_dlcc() {
    N_RUN=$((N_RUN + 1))
    OUT=$TMP/out.$N_RUN
    ERR=$TMP/err.$N_RUN
    if [[ $SANITIZED == 1 ]]; then
        { timeout -k 5 "${CHECK_TIMEOUT:-$TIMEOUT}" "$DLCC" "$@" >"$OUT" 2>"$ERR" </dev/null; } 2>/dev/null
    else
        { (ulimit -v 6291456 2>/dev/null; exec timeout -k 5 "${CHECK_TIMEOUT:-$TIMEOUT}" "$DLCC" "$@") >"$OUT" 2>"$ERR" </dev/null; } 2>/dev/null
    fi
    RC=$?
}

# snippet — the start of the last run's stderr on one line, non-printable bytes shown as '?'.
snippet() { head -c 300 "$ERR" | tr '\n' '|' | tr -c '[:print:]' '?'; }

# crash_reason — non-empty when the last run crashed, hung or reported a sanitizer error.
crash_reason() {
    if [[ $RC == 124 || $RC == 137 ]]; then
        echo "timed out after ${CHECK_TIMEOUT:-$TIMEOUT}s (exit $RC)"
    elif ((RC >= 128)); then
        echo "killed by signal $((RC - 128)) (exit $RC); stderr: $(snippet)"
    elif grep -a -q -E 'ERROR: [A-Za-z]*Sanitizer|runtime error:|Sanitizer has encountered|AddressSanitizer' "$ERR" "$OUT"; then
        echo "sanitizer report: $(grep -a -h -m1 -E 'ERROR: [A-Za-z]*Sanitizer|runtime error:|Sanitizer' "$ERR" "$OUT" | head -1)"$'\n'"$(grep -a -h -E '^ +#[0-9] ' "$ERR" | head -6)"
    fi
}

# message_problem — non-empty when stderr is not exactly one 'dlcc: error: ...' line (warnings aside).
message_problem() {
    local lines
    lines=$(grep -a -v -c '^dlcc: warning: ' "$ERR")
    if [[ $lines != 1 ]]; then
        echo "expected one 'dlcc: error:' line on stderr, got $lines: $(snippet)"
    elif ! grep -a -v '^dlcc: warning: ' "$ERR" | grep -a -q '^dlcc: error: .'; then
        echo "stderr is not 'dlcc: error: ...': $(snippet)"
    fi
}

# error_problem USAGE — why the last run is not a clean error exit (empty when it is): exit 1
# (or 2 when USAGE is 1), no crash, one 'dlcc: error:' line.
error_problem() {
    local why
    why=$(crash_reason)
    if [[ -n $why ]]; then echo "$why"; return; fi
    if [[ $RC != 1 && ! ($1 == 1 && $RC == 2) ]]; then
        echo "exit $RC, expected 1; stderr: $(snippet)"
        return
    fi
    message_problem
}

# expect_error DESC [--usage] -- ARGS...: dlcc ARGS must fail cleanly with exit 1 (or 2 with --usage).
expect_error() {
    local desc=$1 usage=0 why
    shift
    [[ $1 == --usage ]] && usage=1 && shift
    [[ $1 == -- ]] && shift
    run_dlcc "$@"
    why=$(error_problem $usage)
    if [[ -n $why ]]; then fail "$desc" "$why"; else pass "$desc"; fi
}

# expect_error_like DESC REGEX -- ARGS...: as expect_error, and the message must match REGEX
# (grep -E -i), e.g. name the op, the value or say 'cap'.
expect_error_like() {
    local desc=$1 re=$2 why
    shift 2
    [[ $1 == -- ]] && shift
    run_dlcc "$@"
    why=$(error_problem 0)
    if [[ -z $why ]] && ! grep -a -q -E -i -- "$re" "$ERR"; then
        why="message does not match /$re/: $(snippet)"
    fi
    if [[ -n $why ]]; then fail "$desc" "$why"; else pass "$desc"; fi
}

# expect_model_error DESC MODEL [REGEX]...: `dlcc run --quiet MODEL` must fail cleanly (exit 1,
# one line) with a message that names MODEL (its file name) and matches every REGEX (grep -E -i):
# the op, the offending value, 'cap', ...
expect_model_error() {
    local desc=$1 model=$2 why re
    shift 2
    run_dlcc run --quiet "$model"
    why=$(error_problem 0)
    if [[ -z $why ]] && ! grep -a -q -F -- "$(basename "$model")" "$ERR"; then
        why="message does not name the model file $(basename "$model"): $(snippet)"
    fi
    for re in "$@"; do
        if [[ -z $why ]] && ! grep -a -q -E -i -- "$re" "$ERR"; then
            why="message does not match /$re/: $(snippet)"
        fi
    done
    if [[ -n $why ]]; then fail "$desc" "$why"; else pass "$desc"; fi
}

# expect_no_crash DESC -- ARGS...: exit 0 is fine; otherwise as expect_error.
expect_no_crash() {
    local desc=$1
    shift
    [[ $1 == -- ]] && shift
    run_dlcc "$@"
    local why
    why=$(crash_reason)
    if [[ -n $why ]]; then fail "$desc" "$why"; return; fi
    if [[ $RC == 0 ]]; then pass "$desc"; return; fi
    if [[ $RC != 1 ]]; then
        fail "$desc" "exit $RC, expected 0 or 1; stderr: $(snippet)"
        return
    fi
    why=$(message_problem)
    if [[ -n $why ]]; then fail "$desc" "$why"; return; fi
    pass "$desc"
}

# expect_ok DESC -- ARGS...: dlcc ARGS must succeed (exit 0) without a sanitizer report.
expect_ok() {
    local desc=$1 why
    shift
    [[ $1 == -- ]] && shift
    run_dlcc "$@"
    why=$(crash_reason)
    [[ -z $why && $RC != 0 ]] && why="exit $RC, expected 0; stderr: $(snippet)"
    if [[ -n $why ]]; then fail "$desc" "$why"; else pass "$desc"; fi
}

# ---------------------------------------------------------------------------------------------
echo "== generating test models (seed $SEED) into $TMP"
EXTRA=()
[[ -f $ROOT/models/default.onnx ]] && EXTRA+=("$ROOT/models/default.onnx")
if ! "$PY" "$HERE/gen_models.py" "$TMP" "$SEED" "${EXTRA[@]}" >"$TMP/gen.log" 2>&1; then
    fail "generate test models with $PY" "$(tail -3 "$TMP/gen.log" | tr '\n' '|')"
    echo "$PASSED passed, $FAILED failed"
    exit 1
fi
B=$TMP/bad
cd "$TMP" || exit 1

echo "== unreadable or non-ONNX model files"
expect_error "missing model file" -- run "$TMP/does-not-exist.onnx"
expect_error "missing model file (show)" -- show "$TMP/does-not-exist.onnx"
expect_error "directory as model" -- run "$TMP"
expect_error "directory as model (show)" -- show "$TMP"
expect_error "empty model file" -- run "$B/empty.onnx"
expect_error "text file as model" -- run "$B/text.onnx"
expect_error "a .npy file as model" -- run "$B/ok.npy"
expect_error "/dev/null as model" -- run /dev/null
if [[ -r /dev/zero ]]; then expect_error "/dev/zero as model" -- run /dev/zero; fi
# (10 s: opening a FIFO for reading blocks until a writer comes, so a hang is likely)
mkfifo "$TMP/fifo.onnx" 2>/dev/null && CHECK_TIMEOUT=10 expect_error "a FIFO as model (must not block)" -- run "$TMP/fifo.onnx"

echo "== malformed graphs"
expect_model_error "unknown op" "$B/unknown_op.onnx" 'FooBarNoSuchOp'
expect_model_error "unknown op domain" "$B/unknown_domain.onnx" 'nosuchdomain'
expect_model_error "node input not defined anywhere" "$B/undefined_input.onnx" 'nonexistent_tensor'
expect_model_error "graph output not produced" "$B/undefined_output.onnx" 'nonexistent_output'
expect_model_error "cycle between two nodes" "$B/cycle.onnx"
expect_model_error "node consuming its own output" "$B/self_loop.onnx"
expect_model_error "two nodes defining the same value" "$B/duplicate_output.onnx" 'Y'
expect_error "cycle (show)" -- show "$B/cycle.onnx"
expect_model_error "Add of [2,3] and [4,5]" "$B/add_shape_mismatch.onnx" 'Add' '\[2,3\]' '\[4,5\]'
expect_model_error "MatMul [2,3] x [4,5]" "$B/matmul_mismatch.onnx" 'MatMul' '\[2,3\]' '\[4,5\]'
expect_model_error "Add of float32 and int32" "$B/add_dtype_mismatch.onnx" 'Add' 'int32'
expect_model_error "Reshape 6 elements to [7]" "$B/reshape_impossible.onnx" 'Reshape'
expect_model_error "Reshape with two -1" "$B/reshape_two_minus_one.onnx" 'Reshape'
expect_model_error "Gather with constant index 5 on a dim of 2 (run time)" "$B/gather_oob.onnx" 'Gather' '5'
expect_model_error "Gather with constant index -3 on a dim of 2" "$B/gather_oob_negative.onnx" 'Gather' '-3'
expect_model_error "Gather axis 7 on rank 2" "$B/gather_bad_axis.onnx" 'Gather' 'axis'
expect_model_error "ConstantOfShape [1<<40] hits the allocation cap" "$B/constantofshape_huge.onnx" 'ConstantOfShape' 'overflow|cap|limit|too (large|big|many)'
expect_model_error "ConstantOfShape [2^31,2^31,2^31] overflows cleanly" "$B/constantofshape_overflow.onnx" 'ConstantOfShape' 'overflow|cap|limit|too (large|big|many)'
expect_model_error "ConstantOfShape [-5]" "$B/constantofshape_negative.onnx" 'ConstantOfShape'
expect_model_error "Expand to [2^20,2^20,2,3] hits the cap" "$B/expand_huge.onnx" 'Expand' 'overflow|cap|limit|too (large|big|many)'
expect_model_error "Tile by [2^30,2^30] hits the cap" "$B/tile_huge.onnx" 'Tile' 'overflow|cap|limit|too (large|big|many)'
expect_model_error "Range 0..1e30 hits the cap" "$B/range_huge.onnx" 'Range' 'overflow|cap|limit|too (large|big|many)'
expect_model_error "Range with delta 0" "$B/range_zero_delta.onnx" 'Range'
expect_model_error "Transpose perm [0,0]" "$B/transpose_bad_perm.onnx" 'Transpose'
expect_model_error "Softmax axis 5 on rank 2" "$B/softmax_bad_axis.onnx" 'Softmax'
expect_model_error "Concat axis -3 on rank 2" "$B/concat_bad_axis.onnx" 'Concat'
expect_model_error "Concat of [2,3] and [2,4] on axis 0" "$B/concat_shape_mismatch.onnx" 'Concat'
expect_model_error "Split sizes [2,2] of a dim of 3" "$B/split_bad_sizes.onnx" 'Split'
expect_model_error "Slice with step 0" "$B/slice_zero_step.onnx" 'Slice'
expect_model_error "Conv with 1 input channel and W for 2" "$B/conv_channel_mismatch.onnx" 'Conv'
expect_model_error "Conv with a 5x5 kernel on a 2x2 input" "$B/conv_kernel_larger_than_input.onnx" 'Conv'
expect_model_error "Conv with stride 0" "$B/conv_zero_stride.onnx" 'Conv' 'stride'
expect_model_error "MaxPool with pads -4" "$B/maxpool_negative_pads.onnx" 'MaxPool' 'pad'
expect_model_error "Pad removing more than the dim" "$B/pad_negative_too_big.onnx" 'Pad'
expect_model_error "attribute of the wrong type (axis=\"one\")" "$B/attr_wrong_type.onnx" 'Flatten' 'axis'
expect_no_crash "opset 999" -- run --quiet "$B/opset_999.onnx"
expect_model_error "Constant: attribute of type TENSOR without a tensor" "$B/attr_tensor_without_t.onnx" "'value'"
expect_model_error "Constant: attribute of type GRAPH without a graph" "$B/attr_graph_without_g.onnx" "'value'"
expect_model_error "Constant: attribute of type SPARSE_TENSOR without one" "$B/attr_sparse_without_payload.onnx" "'value'"
expect_model_error "Constant: attribute of type TENSORS with none" "$B/attr_tensors_empty.onnx" "'value'|Constant"
expect_model_error "Constant: attribute of type FLOATS with none" "$B/attr_floats_empty.onnx" "'value'|Constant"
expect_model_error "Constant: attribute of type 77" "$B/attr_type_77.onnx" "'value_float'"

echo "== malformed tensors"
expect_model_error "initializer raw_data shorter than its shape" "$B/raw_data_short.onnx" "'B'"
expect_model_error "initializer raw_data longer than its shape" "$B/raw_data_long.onnx" "'B'"
expect_model_error "initializer float_data with 2 of 6 values" "$B/float_data_short.onnx" "'B'"
expect_model_error "initializer with dims [-2,3]" "$B/negative_dims.onnx" "'B'" 'negative'
expect_model_error "initializer with dims [2^40,2^30] and no data" "$B/huge_dims_no_data.onnx" "'B'"
expect_model_error "initializer of rank 10" "$B/rank_10_initializer.onnx" "'B'"
expect_model_error "initializer with dtype code 12345" "$B/bad_dtype_code.onnx" "'B'"
expect_model_error "graph input [2^40,2^20] (random input hits the cap)" "$B/input_huge_dims.onnx" "'X'" 'overflow|cap|limit|too (large|big|many)'
expect_no_crash "graph input with dim -7" -- run --quiet "$B/input_negative_dim.onnx"
expect_model_error "graph input of rank 12" "$B/input_rank_12.onnx" "'X'"
expect_model_error "external data at ../../etc/passwd is refused" "$B/ext/ext_dotdot.onnx" 'etc/passwd'
expect_model_error "external data at /etc/passwd is refused" "$B/ext/ext_absolute.onnx" 'etc/passwd'
expect_model_error "external data file missing" "$B/ext/ext_missing.onnx" 'missing_weights.bin'
expect_model_error "external data file too short" "$B/ext/ext_short.onnx" 'short.bin'
expect_model_error "external data offset 2^62" "$B/ext/ext_huge_offset.onnx" 'short.bin'
expect_model_error "external data location is a directory" "$B/ext/ext_directory.onnx" 'adir'
expect_error "external data refused (show)" -- show "$B/ext/ext_dotdot.onnx"

echo "== bad --input files (model input X: float32[2,3])"
M=$B/relu23.onnx
expect_ok "sanity: a good .npy runs" -- run --quiet "$M" --input "X=$B/ok.npy"
expect_error_like ".npy with dtype int32" "'X'.*int32" -- run --quiet "$M" --input "X=$B/wrong_dtype.npy"
expect_error_like ".npy of rank 3" "'X'" -- run --quiet "$M" --input "X=$B/wrong_rank.npy"
expect_error_like ".npy of shape [2,4]" "'X'" -- run --quiet "$M" --input "X=$B/wrong_dim.npy"
expect_error_like ".npy scalar" "'X'" -- run --quiet "$M" --input "X=$B/scalar.npy"
expect_error_like "truncated .npy data" 'truncated\.npy' -- run --quiet "$M" --input "X=$B/truncated.npy"
expect_error_like "truncated .npy header" 'truncated_header\.npy' -- run --quiet "$M" --input "X=$B/truncated_header.npy"
expect_error_like ".npy header length 0xffff" 'header_len_huge\.npy' -- run --quiet "$M" --input "X=$B/header_len_huge.npy"
expect_error_like ".npy header with absurd shape" 'header_garbage\.npy' -- run --quiet "$M" --input "X=$B/header_garbage.npy"
expect_error_like "big-endian .npy" 'big_endian\.npy' -- run --quiet "$M" --input "X=$B/big_endian.npy"
expect_error_like "Fortran-order .npy" 'fortran\.npy' -- run --quiet "$M" --input "X=$B/fortran.npy"
expect_error_like "object .npy (pickle)" 'object\.npy' -- run --quiet "$M" --input "X=$B/object.npy"
expect_error_like "non-npy file as input" 'not_npy\.npy' -- run --quiet "$M" --input "X=$B/not_npy.npy"
expect_error "empty file as input" -- run --quiet "$M" --input "X=$B/empty.onnx"
expect_error "directory as input" -- run --quiet "$M" --input "X=$TMP"
[[ -p $TMP/fifo.onnx ]] && CHECK_TIMEOUT=10 expect_error "a FIFO as --input file (must not block)" -- run --quiet "$M" --input "X=$TMP/fifo.onnx"
expect_error "missing input file" -- run --quiet "$M" --input "X=$TMP/nope.npy"
expect_error_like "--input for a name the model lacks" 'NoSuchInput' -- run --quiet "$M" --input "NoSuchInput=$B/ok.npy"
expect_error "--input without '='" -- run --quiet "$M" --input "$B/ok.npy"
expect_error "--input with an empty name" -- run --quiet "$M" --input "=$B/ok.npy"
expect_error "--input with no value" --usage -- run --quiet "$M" --input
expect_error "--output-dir under a missing folder" -- run --quiet "$M" --output-dir "$TMP/no/such/dir"
echo x >"$TMP/afile"
expect_error "--output-dir is a file" -- run --quiet "$M" --output-dir "$TMP/afile"

echo "== command line"
expect_error "unknown command" --usage -- frobnicate
expect_error "unknown option to run" --usage -- run --no-such-option "$M"
expect_error "unknown option to show" --usage -- show --no-such-option "$M"
expect_error "unknown option to onnx-test" --usage -- onnx-test --no-such-option
expect_error "two models to run" --usage -- run "$M" "$M"
expect_error "unknown backend" --usage -- run "$M" --backend nosuch
expect_error "onnx-test on a missing path" -- onnx-test "$TMP/no-such-test-dir"
run_dlcc run
if [[ -z $(crash_reason) && $RC == 2 ]]; then pass "run with no model: usage, exit 2"; else fail "run with no model" "exit $RC $(crash_reason)"; fi
run_dlcc
if [[ -z $(crash_reason) && $RC == 2 ]]; then pass "no command: usage, exit 2"; else fail "no command" "exit $RC $(crash_reason)"; fi
expect_error "show --dot into a missing folder" -- show "$M" --dot "$TMP/no/such/dir/g.dot"

echo "== malformed onnx-test case folders (each must be reported as failed, exit 1)"
expect_ok "onnx-test: a good case passes" -- onnx-test "$TMP/cases/ok"
for c in "$TMP"/cases/*; do
    name=$(basename "$c")
    [[ $name == ok ]] && continue
    run_dlcc onnx-test "$c"
    why=$(crash_reason)
    [[ -z $why && $RC != 1 ]] && why="exit $RC, expected 1; stderr: $(snippet)"
    [[ -z $why ]] && ! grep -a -q -E "^(FAIL|UNSUPPORTED) +$name" "$OUT" &&
        why="no 'FAIL $name' or 'UNSUPPORTED $name' line: $(head -c 300 "$OUT" | tr '\n' '|')"
    if [[ -n $why ]]; then fail "onnx-test: case $name" "$why"; else pass "onnx-test: case $name"; fi
done
run_dlcc onnx-test "$TMP/cases/"
why=$(crash_reason)
[[ -z $why && $RC != 1 ]] && why="exit $RC, expected 1"
if [[ -n $why ]]; then fail "onnx-test: the folder of all cases" "$why"; else pass "onnx-test: the folder of all cases"; fi

echo "== truncated and byte-flipped models"
n=0
while IFS=$'\t' read -r path kind expect; do
    n=$((n + 1))
    name=$(basename "$path")
    if [[ $expect == err ]]; then
        expect_error "$kind $name" -- run --quiet "$path"
    else
        expect_no_crash "$kind $name" -- run --quiet "$path"
    fi
    if ((n % 4 == 0)); then
        expect_no_crash "$kind $name (show --nodes --dot)" -- show --nodes "$path" --dot "$TMP/g.dot"
    fi
    rm -f "$OUT" "$ERR"
done <"$TMP/mut/manifest.tsv"

echo "$PASSED passed, $FAILED failed"
[[ $FAILED == 0 ]]
