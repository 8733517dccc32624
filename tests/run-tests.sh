#!/usr/bin/env bash
# The test suite. Usage: tests/run-tests.sh [BUILD_DIR]   (default build/)
# Runs each suite, sums their "N passed, N failed" lines and ends with the total. Exit status is
# non-zero when any check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
DLCC="$BUILD/dlcc"
LOG_DIR="$BUILD/test-logs"
# Compiled kernels are cached per build directory, never in the user's ~/.cache.
case $BUILD in /*) cache_default=$BUILD/cache ;; *) cache_default=$PWD/$BUILD/cache ;; esac
export DLCC_CACHE_DIR=${DLCC_CACHE_DIR:-$cache_default}
mkdir -p "$LOG_DIR"
ONNX_NODE_DIR=${ONNX_NODE_DIR:-/usr/share/libonnx-testdata/data/node}
total_pass=0
total_fail=0

# run_suite NAME CMD...: runs CMD, shows its failures, adds its last "N passed, N failed" line.
run_suite() {
    local name=$1
    shift
    local log="$LOG_DIR/$name.log" start=$SECONDS
    echo "=== $name"
    "$@" >"$log" 2>&1
    local rc=$?
    grep -E '^(FAIL|UNSUPPORTED|CRASH)|REGRESSION|ERROR|runtime error' "$log" | head -40
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    if [ -z "$line" ]; then
        echo "  $name printed no summary (exit $rc); last lines:"
        tail -5 "$log" | sed 's/^/    /'
        total_fail=$((total_fail + 1))
        return
    fi
    local p f
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    echo "  $line (exit $rc, $((SECONDS - start)) s; log: $log)"
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
}

# The conformance suite on one backend (ref or native): every case in tests/onnx-passing.txt
# (those the reference backend passes) must pass (no regressions), and at least 75% of all cases.
conformance() {
    local backend=$1
    local out="$LOG_DIR/onnx-node-$backend${DLCC_ISA:+-$DLCC_ISA}.txt"
    "$DLCC" onnx-test --backend "$backend" --quiet --expect tests/onnx-passing.txt \
        --write-passing "$LOG_DIR/onnx-passing-now-$backend${DLCC_ISA:+-$DLCC_ISA}.txt" "$ONNX_NODE_DIR" >"$out" 2>&1
    local rc=$?
    grep -E 'REGRESSION' "$out"
    local line passed failed
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
    passed=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    failed=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    local regressions
    regressions=$(grep -E '^[0-9]+ regressions' "$out" | sed -E 's/^([0-9]+).*/\1/')
    echo "ONNX node cases: $line ($regressions regressions)"
    local checks_pass=0 checks_fail=0
    if [ "${regressions:-1}" -eq 0 ] && [ "$rc" -eq 0 ]; then
        echo "PASS no regression against tests/onnx-passing.txt"; checks_pass=$((checks_pass + 1))
    else
        echo "FAIL regressions against tests/onnx-passing.txt"; checks_fail=$((checks_fail + 1))
    fi
    if [ -n "$passed" ] && [ $((passed * 100)) -ge $(((passed + failed) * 75)) ]; then
        echo "PASS at least 75% of ONNX node cases pass ($passed of $((passed + failed)))"
        checks_pass=$((checks_pass + 1))
    else
        echo "FAIL fewer than 75% of ONNX node cases pass ($passed of $((passed + failed)))"
        checks_fail=$((checks_fail + 1))
    fi
    echo "$checks_pass passed, $checks_fail failed"
}

smoke() {
    local p=0 f=0
    # rejects OPTION VALUE MESSAGE COMMAND...: each command refuses OPTION VALUE with MESSAGE
    rejects() {
        local opt=$1 val=$2 msg=$3 cmd
        shift 3
        for cmd in "$@"; do
            if "$DLCC" $cmd models/default.onnx "$opt" "$val" >"$out/rejects.txt" 2>&1; then
                echo "FAIL dlcc $cmd accepts $opt $val"; f=$((f + 1))
            elif grep -q -- "$msg" "$out/rejects.txt"; then
                echo "PASS dlcc $cmd rejects $opt $val"; p=$((p + 1))
            else
                echo "FAIL dlcc $cmd $opt $val: unclear message"; f=$((f + 1))
            fi
        done
    }
    if "$BUILD/examples/build_mlp" >/dev/null; then echo "PASS example build_mlp"; p=$((p + 1)); else echo "FAIL example build_mlp"; f=$((f + 1)); fi
    local out
    out=$(mktemp -d)
    if "$DLCC" run models/default.onnx --output-dir "$out" >/dev/null 2>&1 && [ -s "$out/probs.npy" ]; then
        echo "PASS dlcc run default model writes probs.npy"; p=$((p + 1))
    else
        echo "FAIL dlcc run default model"; f=$((f + 1))
    fi
    local root=$PWD
    /usr/bin/python3 -c "import numpy as np; np.save('$out/x.npy', np.ones((2,3,32,32), np.float32))"
    if (cd "$out" && "$root/$BUILD/examples/load_onnx" "$root/models/default.onnx" x.npy >/dev/null 2>&1) &&
        /usr/bin/python3 -c "import numpy as np; y=np.load('$out/out_0.npy'); assert y.shape==(2,10) and abs(y.sum()-2)<1e-4"; then
        echo "PASS example load_onnx (batch 2 through the symbolic batch dim)"; p=$((p + 1))
    else
        echo "FAIL example load_onnx"; f=$((f + 1))
    fi
    if "$DLCC" show models/default.onnx --dot "$out/g.dot" | grep -q 'parameters: 10058' && grep -q digraph "$out/g.dot"; then
        echo "PASS dlcc show prints parameters and writes DOT"; p=$((p + 1))
    else
        echo "FAIL dlcc show"; f=$((f + 1))
    fi
    # external data: the same model with every weight in a side file gives identical outputs
    mkdir -p "$out/ext"
    /usr/bin/python3 -c "import onnx; onnx.save_model(onnx.load('models/default.onnx'), '$out/ext/model.onnx', save_as_external_data=True, all_tensors_to_one_file=True, location='weights.bin', size_threshold=0)"
    if [ -s "$out/ext/weights.bin" ] && "$DLCC" run models/default.onnx --seed 3 --quiet --output-dir "$out/a" &&
        "$DLCC" run "$out/ext/model.onnx" --seed 3 --quiet --output-dir "$out/b" && cmp -s "$out/a/probs.npy" "$out/b/probs.npy"; then
        echo "PASS external data file gives the same outputs"; p=$((p + 1))
    else
        echo "FAIL external data"; f=$((f + 1))
    fi
    for cmd in run show onnx-test bench profile tune; do
        if "$DLCC" $cmd --help | grep -q usage; then echo "PASS dlcc $cmd --help"; p=$((p + 1)); else echo "FAIL dlcc $cmd --help"; f=$((f + 1)); fi
    done
    # bench and profile: the JSON line parses with median_ms > 0; the trace is valid JSON with
    # one complete event per step (no timing thresholds)
    if "$DLCC" bench models/default.onnx --iters 3 --warmup 1 --threads 1 --json 2>/dev/null >"$out/bench.json" &&
        /usr/bin/python3 -c "import json; l=open('$out/bench.json').read().splitlines(); assert len(l)==1; d=json.loads(l[0]); assert d['median_ms']>0 and d['iters']==3 and d['threads']==1 and d['model']=='models/default.onnx'"; then
        echo "PASS dlcc bench --json prints one valid JSON line"; p=$((p + 1))
    else
        echo "FAIL dlcc bench --json"; f=$((f + 1))
    fi
    if "$DLCC" profile models/default.onnx --iters 2 --threads 1 --trace "$out/trace.json" >"$out/profile.txt" 2>&1 &&
        grep -q '^by kind: conv' "$out/profile.txt" &&
        /usr/bin/python3 -c "import json; d=json.load(open('$out/trace.json')); e=[x for x in d['traceEvents'] if x['ph']=='X']; assert len(e)>=2 and all(x['dur']>=0 for x in e)"; then
        echo "PASS dlcc profile prints the table and writes a valid Chrome trace"; p=$((p + 1))
    else
        echo "FAIL dlcc profile"; f=$((f + 1))
    fi
    # dlcc tune writes a record per layer geometry; a run with them matches one without
    # (another algorithm sums in another order: not bit for bit); a malformed file is refused
    # with its line, by every command that compiles
    if "$DLCC" tune models/default.onnx --threads 1 --rounds 1 --iters 2 --warmup 0 --out "$out/tune.txt" >"$out/tune.log" 2>&1 &&
        grep -q '^conv [a-z0-9]* n=\* c=16>16 .* -> ' "$out/tune.txt" && grep -q 'wrote .* records' "$out/tune.log" &&
        "$DLCC" run models/default.onnx --seed 3 --quiet --output-dir "$out/ta" &&
        "$DLCC" run models/default.onnx --seed 3 --quiet --tuning "$out/tune.txt" --output-dir "$out/tb" &&
        /usr/bin/python3 -c "import numpy as np; a=np.load('$out/ta/probs.npy'); b=np.load('$out/tb/probs.npy'); assert a.shape==b.shape and np.abs(a-b).max() < 1e-5"; then
        echo "PASS dlcc tune writes records; dlcc run --tuning gives the same outputs"; p=$((p + 1))
    else
        echo "FAIL dlcc tune / run --tuning"; f=$((f + 1))
    fi
    printf 'conv x -> fastest\n' >"$out/bad-tune.txt"
    for cmd in run compile bench profile tune; do
        opt=--tuning
        [ $cmd = tune ] && opt=--out
        if "$DLCC" $cmd models/default.onnx $opt "$out/bad-tune.txt" >"$out/bt.txt" 2>&1; then
            echo "FAIL dlcc $cmd accepts a malformed tuning file"; f=$((f + 1))
        elif grep -q "bad-tune.txt' line 1: unknown algorithm 'fastest'" "$out/bt.txt"; then
            echo "PASS dlcc $cmd refuses a malformed tuning file, naming its line"; p=$((p + 1))
        else
            echo "FAIL dlcc $cmd: unclear message for a malformed tuning file"; f=$((f + 1))
        fi
    done
    if ! "$DLCC" run models/default.onnx --backend ref --tuning "$out/tune.txt" >"$out/bt.txt" 2>&1 &&
        grep -q "does not apply to --backend ref" "$out/bt.txt"; then
        echo "PASS dlcc run refuses --tuning with the reference backend"; p=$((p + 1))
    else
        echo "FAIL dlcc run --backend ref --tuning"; f=$((f + 1))
    fi
    # --math bf16: the report says what the products run in; outputs stay close to fp32's; an
    # unknown mode and the reference backend are refused
    if "$DLCC" compile models/default.onnx --report --math bf16 >"$out/math.txt" 2>&1 &&
        grep -q '^math: bf16: MatMul/Gemm products: 1, convolutions as GEMMs: 3, in ' "$out/math.txt" &&
        "$DLCC" run models/default.onnx --seed 3 --quiet --math bf16 --check &&
        "$DLCC" run models/default.onnx --seed 3 --quiet --math fp32 --output-dir "$out/mf" &&
        "$DLCC" run models/default.onnx --seed 3 --quiet --math bf16 --output-dir "$out/mb" &&
        /usr/bin/python3 -c "import numpy as np; a=np.load('$out/mf/probs.npy'); b=np.load('$out/mb/probs.npy'); assert a.shape==b.shape and np.abs(a-b).max() < 1e-2"; then
        echo "PASS dlcc compile --report --math bf16 names it; run --math bf16 stays near fp32"; p=$((p + 1))
    else
        echo "FAIL dlcc --math bf16"; f=$((f + 1))
    fi
    rejects --math fp16 "--math: expected fp32 or bf16, got 'fp16'" run compile bench profile tune train
    if ! "$DLCC" run models/default.onnx --backend ref --math bf16 >"$out/bt.txt" 2>&1 &&
        grep -q "math chooses compiled kernels: it does not apply to --backend ref" "$out/bt.txt"; then
        echo "PASS dlcc run refuses --math with the reference backend"; p=$((p + 1))
    else
        echo "FAIL dlcc run --backend ref --math"; f=$((f + 1))
    fi
    rejects --threads x "--threads: expected a positive integer, got 'x'" run compile bench profile onnx-test tune
    rm -rf "$out"
    echo "$p passed, $f failed"
}

run_suite unit "$BUILD/tests/test_core" models/default.onnx
# Every other unit-test binary (tests/unit/test_*.c) is its own suite.
for bin in "$BUILD"/tests/test_*; do
    name=$(basename "$bin")
    [ "$name" = test_core ] && continue
    case "$name" in *.d | *.o) continue ;; esac
    [ -x "$bin" ] || continue
    run_suite "unit-${name#test_}" "$bin"
done
# Under the sanitizers (make test-asan), the tests of the kernels that write into memory the host
# sized run again with their generated modules sanitized too: the host's sanitizer alone does not
# see a module overrun its scratch (a stride-1 ConvTranspose's per-call packing had).
if [[ ${DLCC_SANITIZED:-0} == 1 ]]; then
    for t in convtranspose resize groupnorm argmax copy rnn; do
        DLCC_CFLAGS="-O1 -march=native -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
            run_suite "unit-$t-modules-sanitized" "$BUILD/tests/test_$t"
    done
fi
# The runtime kernels built per instruction set (Makefile: tests-isa/), for the sets this CPU has.
cpu_has() { grep -qw "$1" /proc/cpuinfo 2>/dev/null; }
isa_ok() {
    case $1 in
        avx512) cpu_has avx512f && cpu_has avx512bw && cpu_has avx512vl && cpu_has avx512dq ;;
        avx512bf16) isa_ok avx512 && cpu_has avx512_bf16 ;;
        avx2) cpu_has avx2 && cpu_has fma && cpu_has bmi2 ;;
        *) true ;;
    esac
}
for isa in avx512 avx512bf16 avx2 generic; do
    if ! isa_ok $isa; then
        echo "=== $isa: this CPU lacks it; its kernel tests are not run"
        continue
    fi
    for bin in "$BUILD"/tests-isa/$isa/test_*; do
        [ -x "$bin" ] || continue
        case "$bin" in *.d | *.o) continue ;; esac
        name=$(basename "$bin")
        run_suite "unit-${name#test_}-$isa" "$bin"
    done
done
run_suite smoke smoke
run_suite onnx-conformance-ref conformance ref
run_suite onnx-conformance-native conformance native
# The generated code and runtime kernels built for the narrower instruction sets (the default
# above is the CPU's best, -march=native).
for isa in avx2 generic; do
    isa_ok $isa && DLCC_ISA=$isa run_suite onnx-conformance-native-$isa conformance native
done
run_suite robustness tests/robust/run.sh "$BUILD"
run_suite torch-parity-native tests/torch/run.sh "$BUILD"
for isa in avx2 generic; do
    isa_ok $isa && DLCC_ISA=$isa DLCC_TORCH_MODELS="mobilenet_v2 bert_encoder" \
        run_suite torch-parity-native-$isa tests/torch/run.sh "$BUILD"
done
DLCC_BACKEND=ref run_suite torch-parity-ref tests/torch/run.sh "$BUILD"
run_suite aot tests/aot/run.sh "$BUILD"
# Training: every gradient graph also compiled natively; PyTorch parity of 20 steps; resume,
# kill -9 and corrupt checkpoints; the digits example's accuracy.
DLCC_GRAD_NATIVE=1 run_suite grad-native "$BUILD/tests/test_grad"
run_suite train-parity tests/train/run.sh "$BUILD"
run_suite train-resume tests/train/resume.sh "$BUILD"
run_suite train-digits examples/digits/train.sh "$BUILD"
DLCC_DIGITS_MATH=bf16 run_suite train-digits-bf16 examples/digits/train.sh "$BUILD" "$BUILD/digits-bf16"

echo "=== total"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
