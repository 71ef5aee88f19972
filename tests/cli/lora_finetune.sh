# LoRA and QLoRA fine-tuning of the tiny recipe from an HF fixture (issue 23): the loss falls; the
# checkpoint holds only the adapters (small) and names its base; the merged export equals
# base + (alpha/r) B A with every other tensor the base's bit for bit (checked by the independent
# numpy reader against the PEFT export); tp2 x pp2 and dp2 x zero 3 give the single-rank losses;
# a resume continues the same trajectory; dropout gives the same losses in every layout; QLoRA (nf4)
# trains; a LoRA checkpoint samples.
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
PY=/usr/bin/python3
REF="$SRC/tests/pretrained/gpt2_numpy.py"
$PY "$REF" make-hf "$WORK/base" --layers 4 --heads 4 --embd 128 --vocab 257 --positions 128 --seed 21
lora() {  # lora NAME RANKS STEPS SETS...
  local name=$1 np=$2 steps=$3
  shift 3
  OMP_NUM_THREADS=$((np > 1 ? 1 : 2)) mpi -np "$np" "$LOOM" train configs/tiny.yaml --set model.init_from="$WORK/base" \
    --set lora.rank=8 --set lora.alpha=16 --set optim.weight_decay=0 --set train.steps="$steps" --set log.every=1 \
    --set log.eval_every=0 --set log.dir="$WORK/$name" "$@" > "$WORK/$name.out" || fail "$name: $(tail -3 "$WORK/$name.out")"
}
lora one 1 30 --set checkpoint.dir="$WORK/ck" --set checkpoint.every=15 --set checkpoint.keep_last=5
grep -q "LoRA rank 8, alpha 16 (scale 2)" "$WORK/one.out" || fail "no LoRA report: $(head -5 "$WORK/one.out")"
grep "LoRA rank" "$WORK/one.out" | cut -c1-240
python3 - "$WORK" <<'PY'
import json, os, sys
w = sys.argv[1]
loss = [json.loads(l)["loss"] for l in open(f"{w}/one/metrics.jsonl")]
first, last = loss[0], sum(loss[-5:]) / 5
print(f"LoRA: loss {first:.4f} -> {last:.4f} (mean of the last 5)")
assert last < first - 0.3, "the LoRA run did not learn"
man = json.load(open(f"{w}/ck/step_00000030/manifest.json"))
assert man["model"]["lora"]["rank"] == 8 and man["model"]["base"].endswith("/base"), man["model"]
names = [d["name"] for d in man["files"][0]["datasets"]]
assert names and all(".lora_" in n for n in names), f"non-adapter datasets: {[n for n in names if '.lora_' not in n][:3]}"
ck = os.path.getsize(f"{w}/ck/step_00000030/model.h5")
base = os.path.getsize(f"{w}/base/model.safetensors")
print(f"adapter checkpoint {ck / 1e6:.2f} MB (parameters + Adam moments) vs the base's weights {base / 1e6:.2f} MB")
assert ck < base / 3
PY

# `loom ckpt inspect` lists the adapters a LoRA checkpoint holds (it looked for params/wte, which
# only the base has, and refused every LoRA checkpoint).
"$LOOM" ckpt inspect "$WORK/ck" > "$WORK/inspect.out" || { cat "$WORK/inspect.out"; fail "ckpt inspect of a LoRA checkpoint"; }
grep -q "^    h.0.attn.qkv.lora_a \[" "$WORK/inspect.out" || { cat "$WORK/inspect.out"; fail "inspect lists no adapter"; }
grep -q "^    wte " "$WORK/inspect.out" && fail "inspect lists the frozen base's wte, which the checkpoint does not hold"
# Merged and PEFT exports; the numpy reader checks merged = base + scale * B A.
"$LOOM" export "$WORK/ck" --out "$WORK/merged" > /dev/null
"$LOOM" export "$WORK/ck" --out "$WORK/peft" --peft > /dev/null
$PY "$REF" check-merge "$WORK/base" "$WORK/merged" "$WORK/peft" || fail "merged export"
# A LoRA checkpoint samples (the base merged on the fly) and evaluates like its merged export.
"$LOOM" sample "$WORK/ck" --prompt "The " --max-tokens 8 --seed 1 > /dev/null 2>&1 || fail "sample from a LoRA checkpoint"
e1=$("$LOOM" eval "$WORK/ck" --data data/fortunes --batches 4 --seq-len 64 | grep -oE "loss [0-9.]+")
e2=$("$LOOM" eval "$WORK/merged" --data data/fortunes --batches 4 --seq-len 64 | grep -oE "loss [0-9.]+")
[ "$e1" = "$e2" ] || fail "eval of the checkpoint ($e1) and of its merged export ($e2) differ"

# Layouts: the single rank's losses.
lora tp2pp2 4 3 --set parallel.tp=2 --set parallel.pp=2
lora dp2z3 2 3 --set parallel.zero=3
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
loss = lambda run: [json.loads(l)["loss"] for l in open(f"{w}/{run}/metrics.jsonl")]
one = loss("one")[:3]
for run in ("tp2pp2", "dp2z3"):
    got = loss(run)
    print(f"{run}: {got} vs one rank {one}")
    assert all(abs(a - b) <= 1e-5 * a for a, b in zip(one, got)), run
PY

# LoRA dropout (0.2): masks from the seed, step and global micro-batch, so tp2 x pp2 and dp2 give
# the single rank's losses too; and dropping changes the trajectory.
lora drop1 1 3 --set lora.dropout=0.2
lora drop_tp2pp2 4 3 --set lora.dropout=0.2 --set parallel.tp=2 --set parallel.pp=2
lora drop_dp2 2 3 --set lora.dropout=0.2 --set parallel.zero=1
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
loss = lambda run: [json.loads(l)["loss"] for l in open(f"{w}/{run}/metrics.jsonl")]
one, plain = loss("drop1"), loss("one")[:3]
assert one[0] == plain[0] and one[1] != plain[1], f"dropout: {one} vs no dropout {plain}"
for run in ("drop_tp2pp2", "drop_dp2"):
    got = loss(run)
    print(f"dropout {run}: {got} vs one rank {one}")
    assert all(abs(a - b) <= 1e-5 * a for a, b in zip(one, got)), run
PY

# Resume from step 15: the same losses as the uninterrupted run.
mkdir -p "$WORK/ck2" && cp -r "$WORK/ck/step_00000015" "$WORK/ck2/"
lora resumed 1 30 --set checkpoint.dir="$WORK/ck2"
grep -q "resumed from .*step_00000015" "$WORK/resumed.out" || fail "no resume"
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
a = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(f"{w}/one/metrics.jsonl")}
b = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(f"{w}/resumed/metrics.jsonl")}
assert min(b) == 15, min(b)  # metrics count steps from 0: the 16th step
for s in b:
    assert abs(a[s] - b[s]) <= 1e-6 * a[s], (s, a[s], b[s])
print("resumed after step 15: steps 16-30 equal the uninterrupted run's")
PY

# The frozen base is recorded by its absolute path and fingerprint, and the adapters are used
# again only over the same weights (before, a relative path without one: a base that changed in
# place took the adapters silently). From another working directory the checkpoint evaluates as
# before; over a copy of the base altered after the run, eval and a resume are refused, and
# checkpoint.allow_changes=true resumes saying so.
python3 -c "
import json; m = json.load(open('$WORK/ck/step_00000030/manifest.json'))['model']
import re; assert m['base'] == '$WORK/base' and re.fullmatch(r'[0-9]+ bytes, CRC-32C [0-9a-f]{8}', m['base_fingerprint']), m" ||
  fail "the base's absolute path and fingerprint are not recorded"
e3=$(cd / && "$LOOM" eval "$WORK/ck" --data "$SRC/data/fortunes" --batches 4 --seq-len 64 | grep -oE "loss [0-9.]+")
[ "$e3" = "$e1" ] || fail "eval from another working directory gave $e3, not $e1"
# A base that moved: eval says so and how to go on; --base gives its new place (checked against
# the fingerprint), for eval, sample and the PEFT export (whose config then names it).
mv "$WORK/base" "$WORK/moved"
set +e
"$LOOM" eval "$WORK/ck" --data data/fortunes --batches 4 --seq-len 64 > "$WORK/evalmoved.out" 2>&1; rc=$?
set -e
[ "$rc" = 2 ] || { cat "$WORK/evalmoved.out"; fail "eval with its base moved away exited $rc, expected 2"; }
grep -q "its frozen base cannot be opened (.*/base: no such file or directory.*); if it moved, loom eval, sample and export take its new place with --base PATH" \
  "$WORK/evalmoved.out" || { cat "$WORK/evalmoved.out"; fail "eval with its base moved away: no clear error"; }
e4=$("$LOOM" eval "$WORK/ck" --base "$WORK/moved" --data data/fortunes --batches 4 --seq-len 64 | grep -oE "loss [0-9.]+")
[ "$e4" = "$e1" ] || fail "eval --base at the moved base gave $e4, not $e1"
"$LOOM" sample "$WORK/ck" --base "$WORK/moved" --prompt "The " --max-tokens 4 --seed 1 > /dev/null 2>&1 || fail "sample --base"
"$LOOM" export "$WORK/ck" --base "$WORK/moved" --out "$WORK/peft2" --peft > /dev/null
grep -q "\"base_model_name_or_path\": \"$WORK/moved\"" "$WORK/peft2/adapter_config.json" || fail "PEFT export --base: not named"
set +e
"$LOOM" eval "$WORK/merged" --base "$WORK/moved" --data data/fortunes --batches 1 > "$WORK/evalnotlora.out" 2>&1; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "only a LoRA checkpoint has a frozen base to give" "$WORK/evalnotlora.out" ||
  { cat "$WORK/evalnotlora.out"; fail "--base with a model that is not a LoRA checkpoint: exit $rc"; }
mv "$WORK/moved" "$WORK/base"
cp -r "$WORK/base" "$WORK/base2"
lora onbase2 1 10 --set model.init_from="$WORK/base2" --set checkpoint.dir="$WORK/ck3" --set checkpoint.every=5 \
  --set train.stop_at_step=5
python3 - "$WORK/base2/model.safetensors" <<'PY'
import os, sys
p = sys.argv[1]; n = os.path.getsize(p)
with open(p, 'r+b') as f:  # the last bytes: tensor data, not the header
    f.seek(n - 64); b = f.read(8); f.seek(n - 64); f.write(bytes(x ^ 0x10 for x in b))
PY
set +e
"$LOOM" eval "$WORK/ck3" --data data/fortunes --batches 1 --seq-len 64 > "$WORK/evalb2.out" 2>&1; rc=$?
set -e
[ "$rc" = 2 ] || { cat "$WORK/evalb2.out"; fail "eval over an altered base exited $rc, expected 2"; }
grep -q "its frozen base, model.base .*base2, holds other weights than the adapters were trained on" "$WORK/evalb2.out" ||
  { cat "$WORK/evalb2.out"; fail "eval over an altered base: no clear refusal"; }
# --base does not get round the check: ck's base was base, not the altered base2.
set +e
"$LOOM" eval "$WORK/ck" --base "$WORK/base2" --data data/fortunes --batches 1 --seq-len 64 > "$WORK/evalb2b.out" 2>&1; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "its frozen base, --base .*base2, holds other weights than the adapters were trained on" "$WORK/evalb2b.out" ||
  { cat "$WORK/evalb2b.out"; fail "eval --base at other weights: exit $rc, no clear refusal"; }
resume_b2() {
  "$LOOM" train configs/tiny.yaml --set model.init_from="$WORK/base2" --set lora.rank=8 --set lora.alpha=16 \
    --set optim.weight_decay=0 --set train.steps=10 --set log.eval_every=0 --set log.dir="$WORK/onbase2" \
    --set checkpoint.dir="$WORK/ck3" "$@"
}
set +e
resume_b2 > "$WORK/resb2.out" 2>&1; rc=$?
set -e
[ "$rc" = 2 ] || { cat "$WORK/resb2.out"; fail "a resume over an altered base exited $rc, expected 2"; }
grep -q "holds other weights than the frozen base the checkpoint's adapters were trained on" "$WORK/resb2.out" ||
  { cat "$WORK/resb2.out"; fail "a resume over an altered base: no clear refusal"; }
! grep -q "resumed from" "$WORK/resb2.out" || fail "a refused resume over an altered base said 'resumed from'"
resume_b2 --set checkpoint.allow_changes=true > "$WORK/resb2ok.out" 2>&1 || { cat "$WORK/resb2ok.out"; fail "allow_changes"; }
grep -q "(checkpoint.allow_changes=true): the adapters train on over these weights" "$WORK/resb2ok.out" ||
  { cat "$WORK/resb2ok.out"; fail "allow_changes: not said"; }
echo "base fingerprint: $(grep -o "holds other weights.*" "$WORK/evalb2.out" | cut -c1-200)"

# QLoRA: the base's block weights in NF4; it trains, from nearly the same first loss.
lora qlora 1 20 --set lora.quantize=nf4
grep "LoRA rank" "$WORK/qlora.out" | grep -o "frozen base.*"
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
q = [json.loads(l)["loss"] for l in open(f"{w}/qlora/metrics.jsonl")]
one = [json.loads(l)["loss"] for l in open(f"{w}/one/metrics.jsonl")]
print(f"QLoRA nf4: loss {q[0]:.4f} -> {sum(q[-5:]) / 5:.4f}; first loss unquantized {one[0]:.4f}")
assert abs(q[0] - one[0]) < 0.05 * one[0]
assert sum(q[-5:]) / 5 < q[0] - 0.2
PY
echo PASS
