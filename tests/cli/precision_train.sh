# Mixed precision trains as well as fp32 on the tests' small model (SMALL in common.sh: the tiny
# recipe at half its width and sequence length), 150 steps (a 150-step schedule), on real text
# (measured on it: bf16 0.3% and fp16 0.1% from fp32 at the end):
#   - bf16 ends within 2% of the fp32 run (mean of the last 20 training losses, and val_loss);
#   - fp16 with dynamic loss scaling survives an overflow forced at step 50 (LOOM_FAULT=overflow@50:
#     that step runs at a loss scale of 1e30, so its fp16 gradients overflow in the kernels): the
#     step is skipped, the scale halves, training goes on and ends within 3% of fp32;
#   - every run says what it computes in, and memory per rank shows the activations halved.
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
run() {  # name precision [env...]
  local name=$1 precision=$2; shift 2
  env "$@" "$LOOM" train configs/tiny.yaml "${SMALL[@]}" --set train.precision="$precision" --set log.every=1 --set train.steps=150 \
    --set log.dir="$WORK/$name" > "$WORK/$name.out" 2>&1 || { cat "$WORK/$name.out"; fail "$name failed"; }
  grep -E "^loom: (precision|note)" "$WORK/$name.out" | sed "s/^/$name: /" || true
}
run fp32 fp32
run bf16 bf16
run fp16 fp16 LOOM_FAULT=overflow@50
grep -q "step 50: fp16 gradients overflowed at loss scale 65536" "$WORK/fp16.out" || fail "fp16: no overflow message at step 50"
python3 - "$WORK" <<'PY'
import json, re, sys
work = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
def act_mb(name):  # rank 0's allocated activations, from the memory report in run.json
    return json.load(open(f"{work}/{name}/run.json"))["sessions"][-1]["memory_end"][0]["activations_mb"]
ref = rows("fp32")
def final(r):
    train = [x["loss"] for x in r[-20:] if not x.get("skipped")]
    return sum(train) / len(train), [x["val_loss"] for x in r if "val_loss" in x][-1]
f_train, f_val = final(ref)
print(f"fp32: last-20 loss {f_train:.4f}, val {f_val:.4f}, activations {act_mb('fp32'):.2f} MB")
for name, tol in (("bf16", 0.02), ("fp16", 0.03)):
    r = rows(name)
    assert len(r) == 150, f"{name}: {len(r)} steps logged"
    t, v = final(r)
    dt, dv = abs(t - f_train) / f_train, abs(v - f_val) / f_val
    print(f"{name}: last-20 loss {t:.4f} ({100*dt:.2f}% from fp32), val {v:.4f} ({100*dv:.2f}%), "
          f"activations {act_mb(name):.2f} MB")
    assert dt <= tol and dv <= tol, f"{name} ends more than {100*tol:.0f}% from fp32"
    # Activations in 16 bits, LayerNorm statistics and losses in fp32: a little over half
    # (measured 0.502 on the small model).
    ratio = act_mb(name) / act_mb("fp32")
    assert 0.5 <= ratio <= 0.53, f"{name}: activations {ratio:.3f} of fp32's"
fp16 = rows("fp16")
s49, s50, s51 = fp16[48], fp16[49], fp16[50]  # steps 49, 50 (forced), 51 (0-based step 48..50)
assert s50.get("skipped") == 1 and s50["loss_scale"] == s49["loss_scale"], f"step 50 not skipped: {s50}"
assert s51["loss_scale"] == s49["loss_scale"] / 2, f"scale did not halve: {s49['loss_scale']} -> {s51['loss_scale']}"
assert not any(x.get("skipped") for x in fp16[51:]), "fp16 kept skipping after the overflow"
assert all("loss_scale" in x for x in fp16) and not any("loss_scale" in x for x in rows("bf16")), "loss_scale logging"
print(f"fp16: overflow at step 50 skipped, loss scale {s49['loss_scale']:g} -> {s51['loss_scale']:g}")
PY
echo PASS
