# The tiny recipe trains on real text (the fortunes corpus, bytes): the loss falls from ~5.5 to
# below 2.5 nats (train and validation), and two runs give bitwise-identical losses, learning rates and grad
# norms (the second stopped after 120 steps).
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
mpi -np 1 "$LOOM" train configs/tiny.yaml --set log.dir="$WORK/a" --set log.every=1 > "$WORK/a.out"
# The second run stops after step 120 (train.stop_at_step: the same schedule) and must match
# the first bit for bit over those steps, the validation at step 100 included.
mpi -np 1 "$LOOM" train configs/tiny.yaml --set log.dir="$WORK/b" --set log.every=1 --set train.stop_at_step=120 \
  > "$WORK/b.out"
tail -n 3 "$WORK/a.out"
strip() { sed -E 's/, "tokens_per_s".*//' "$1"; }  # timing fields differ run to run
[ "$(wc -l < "$WORK/b/metrics.jsonl")" = 120 ] || fail "the stopped run logged $(wc -l < "$WORK/b/metrics.jsonl") steps"
# (Its last row also holds the end-of-run validation: compare the 119 before it.)
diff <(strip "$WORK/a/metrics.jsonl" | head -n 119) <(strip "$WORK/b/metrics.jsonl" | head -n 119) > /dev/null ||
  fail "two runs differ"
python3 - "$WORK/a/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for k in ("step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu"):
    assert k in rows[0], f"metrics.jsonl lacks {k}"
first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-20:]) / 20
print(f"first loss {first:.3f}, mean of the last 20 {last:.3f}")
assert first > 5.0, f"initial loss {first} is not ~ln(256)=5.55"
assert last < 2.5, f"the loss did not fall below 2.5 nats: {last}"
vals = [r["val_loss"] for r in rows if "val_loss" in r]
assert len(vals) == 3, f"expected val_loss at steps 100, 200, 300, got {len(vals)}"
assert vals[-1] < 2.5 and vals[-1] < vals[0], f"val_loss did not fall: {vals}"
assert all(r["data_wait_ms"] < 50 for r in rows[1:]), "the loader stalled steps"
print(f"val_loss {vals}")
PY
echo PASS
