#!/usr/bin/env bash
# resume.sh BUILD — checkpoints of `dlcc train`: a run stopped and resumed ends bit-identical to
# one that ran straight through (weights, optimizer state and every later loss); a process killed
# with SIGKILL while saving leaves a loadable checkpoint; a corrupt checkpoint is refused with a
# clear message. Needs Debian's python3 (numpy, torch) for the small model and data.
set -u
BUILD=${1:-build}
DLCC=$(cd "$(dirname "$BUILD/dlcc")" && pwd)/dlcc
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }

/usr/bin/python3 "$HERE/export_models.py" "$T" >/dev/null 2>&1 || { echo "FAIL export"; echo "0 passed, 1 failed"; exit 1; }
M="$T/mlp"
common=(train "$M/model.onnx" --x "$M/X.npy" --y "$M/Y.npy" --optimizer adamw --lr 3e-3 --batch 16
        --val-split 0.1 --seed 7 --quiet --schedule cosine --warmup 5)

# 1. straight through: 3 epochs of 18 steps
"$DLCC" "${common[@]}" --epochs 3 --checkpoint "$T/a.st" --log "$T/a.jsonl" --export "$T/a.onnx" || bad "uninterrupted run"
# 2. stopped after 25 steps (mid-epoch), then resumed to the end
"$DLCC" "${common[@]}" --epochs 3 --checkpoint "$T/b.st" --log "$T/b.jsonl" --save-every 25 --stop-after 25 || bad "first half"
"$DLCC" "${common[@]}" --epochs 3 --checkpoint "$T/b.st" --log "$T/b.jsonl" --export "$T/b.onnx" --resume || bad "resumed half"
if cmp -s "$T/a.onnx" "$T/b.onnx"; then ok "resumed run exports the same bytes"; else bad "resumed run exports the same bytes"; fi
if /usr/bin/python3 - "$T/a.st" "$T/b.st" <<'EOF'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]] for k, v in h.items() if k != '__metadata__'}, h['__metadata__']
(a, ma), (b, mb) = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), 'tensors differ'
assert ma['train.step'] == mb['train.step'] == '54', (ma['train.step'], mb['train.step'])
assert any(k.startswith('state1/') for k in a), 'no optimizer state saved'
EOF
then ok "weights, optimizer state, data order and RNG bit-identical after resume"; else bad "weights, optimizer state, data order and RNG bit-identical after resume"; fi
if /usr/bin/python3 - "$T/a.jsonl" "$T/b.jsonl" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == 54 and len(b) == 54, (len(a), len(b))
assert [x['step'] for x in b] == list(range(1, 55))
assert all(x['loss'] == y['loss'] and x['lr'] == y['lr'] for x, y in zip(a, b)), 'losses differ'
EOF
then ok "every step's loss and lr identical after resume"; else bad "every step's loss and lr identical after resume"; fi

# the schedule: linear warm-up over 5 steps to 3e-3, then cosine down to ~0 at step 54
if /usr/bin/python3 - "$T/a.jsonl" <<'EOF'
import json, math, sys
lr = [json.loads(l)['lr'] for l in open(sys.argv[1])]
base = 3e-3
for s, v in enumerate(lr):
    want = base * (s + 1) / 5 if s < 5 else base * 0.5 * (1 + math.cos(math.pi * (s - 5) / (54 - 5)))
    assert abs(v - want) <= 1e-6 * base, (s + 1, v, want)
EOF
then ok "learning rates follow warm-up + cosine"; else bad "learning rates follow warm-up + cosine"; fi

# BatchNorm running statistics are buffers: saved in the checkpoint and restored on resume
B="$T/cnn_bn"
bn=(train "$B/model.onnx" --x "$B/X.npy" --y "$B/Y.npy" --optimizer sgd --lr 0.05 --momentum 0.9 --batch 16
    --val-split 0.2 --seed 3 --quiet --epochs 2)
"$DLCC" "${bn[@]}" --export "$T/bn_a.onnx" || bad "batchnorm straight run"
"$DLCC" "${bn[@]}" --checkpoint "$T/bn.st" --stop-after 7 || bad "batchnorm first part"
"$DLCC" "${bn[@]}" --checkpoint "$T/bn.st" --resume --export "$T/bn_b.onnx" || bad "batchnorm resumed"
if cmp -s "$T/bn_a.onnx" "$T/bn_b.onnx" && /usr/bin/python3 -c "
import json, struct, sys
b = open('$T/bn.st', 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
assert any(k.startswith('buffer/') and 'running_var' in k for k in json.loads(b[8:8 + n]))"; then
    ok "batchnorm running statistics checkpointed: resumed run exports the same bytes"
else
    bad "batchnorm running statistics checkpointed: resumed run exports the same bytes"
fi

# 3. SIGKILL at moments of a run that saves after every step, each after a first save (waited
#    for, so no timing decides what is tested): the file always loads and training resumes
killed=0
resumed=0
rounds=0
for delay in 0 0.05 0.1 0.2 0.3 0.5; do
    rounds=$((rounds + 1))
    rm -f "$T/k.st"
    "$DLCC" "${common[@]}" --epochs 1000 --checkpoint "$T/k.st" --save-every 1 &
    pid=$!
    waited=0
    while [ ! -e "$T/k.st" ] && [ "$waited" -lt 600 ] && kill -0 "$pid" 2>/dev/null; do
        sleep 0.1
        waited=$((waited + 1))
    done
    sleep "$delay"
    kill -9 "$pid" 2>/dev/null && killed=$((killed + 1))
    wait "$pid" 2>/dev/null
    if [ ! -e "$T/k.st" ]; then
        bad "round $rounds: no checkpoint was written within 60 s"
        continue
    fi
    if "$DLCC" "${common[@]}" --epochs 1000 --stop-after 1 --checkpoint "$T/k.st" --resume 2>"$T/k.err"; then
        resumed=$((resumed + 1))
    else
        bad "killed ${delay}s after the first save: $(cat "$T/k.err")"
    fi
done
if [ "$killed" -eq "$rounds" ] && [ "$resumed" -eq "$rounds" ]; then
    ok "killed mid-run $killed times after a first save, resumed from the checkpoint every time"
else
    bad "kill -9 rounds: $rounds, killed running $killed, resumed $resumed"
fi
# a save cleans up the temp files that killed saves left (their processes are gone)
if ls "$T"/k.st.tmp.* >/dev/null 2>&1; then bad "stale temp files left: $(ls "$T"/k.st.tmp.*)"; else ok "no stale temp checkpoint files left"; fi

# 4. a corrupt checkpoint is refused clearly
cp "$T/a.st" "$T/c.st"
size=$(stat -c %s "$T/c.st")
printf '\x55' | dd of="$T/c.st" bs=1 seek=$((size - 5)) conv=notrunc 2>/dev/null
if ! "$DLCC" "${common[@]}" --epochs 4 --checkpoint "$T/c.st" --resume 2>"$T/c.err" && grep -q "checksum mismatch" "$T/c.err"; then
    ok "corrupt checkpoint refused: $(head -c 120 "$T/c.err")"
else
    bad "corrupt checkpoint: $(cat "$T/c.err")"
fi
# a checkpoint of another optimizer is refused too
if ! "$DLCC" train "$M/model.onnx" --x "$M/X.npy" --y "$M/Y.npy" --optimizer sgd --batch 16 --quiet --checkpoint "$T/a.st" --resume 2>"$T/d.err" && grep -q "optimizer" "$T/d.err"; then
    ok "checkpoint of another optimizer refused"
else
    bad "checkpoint of another optimizer: $(cat "$T/d.err")"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
