# The tiny recipe trains on real text (the fortunes corpus, bytes): the loss falls from ~5.5 to
# below 2.5 nats (train and validation), and two runs give bitwise-identical losses, learning rates and grad
# norms (the second stopped after 120 steps).
# MFU: the first run measures its peak (the CPU's gemm rate), the second is given one
# (LOOM_PEAK_TFLOPS); both compute the same model FLOP/s from their own figure.
source "$(dirname "$0")/common.sh"
unset LOOM_PEAK_TFLOPS
corpus
cd "$SRC"
mpi -np 1 "$LOOM" train configs/tiny.yaml --set log.dir="$WORK/a" --set log.every=1 > "$WORK/a.out"
# The second run stops after step 120 (train.stop_at_step: the same schedule) and must match
# the first bit for bit over those steps, the validation at step 100 included. Without
# checkpoint.dir nothing is kept to continue from: it says so, first and last, and exits 4.
set +e
LOOM_PEAK_TFLOPS=0.5 mpi -np 1 "$LOOM" train configs/tiny.yaml --set log.dir="$WORK/b" --set log.every=1 \
  --set train.stop_at_step=120 > "$WORK/b.out" 2>&1
rc=$?
set -e
[ "$rc" = 4 ] || { tail "$WORK/b.out"; fail "stop_at_step without checkpoint.dir: exit $rc, expected 4"; }
grep -q "warning: train.stop_at_step=120 without checkpoint.dir: nothing is saved there" "$WORK/b.out" ||
  fail "stop_at_step without checkpoint.dir: no warning at the start"
grep -q "stopped at step 120 of 300 on train.stop_at_step; checkpoint.dir is not set, so nothing was saved" "$WORK/b.out" ||
  fail "stop_at_step without checkpoint.dir: not said at the end"
# A value that is not a rate is every rank's error, before the run directory is made.
set +e
LOOM_PEAK_TFLOPS=fast mpi -np 2 "$LOOM" train configs/tiny.yaml --set log.dir="$WORK/c" > "$WORK/c.out" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || { cat "$WORK/c.out"; fail "LOOM_PEAK_TFLOPS=fast: exit $rc, expected 2"; }
grep -q "loom: error: LOOM_PEAK_TFLOPS='fast': expected a positive number" "$WORK/c.out" || { cat "$WORK/c.out"; fail "no error naming LOOM_PEAK_TFLOPS"; }
[ ! -e "$WORK/c" ] || fail "LOOM_PEAK_TFLOPS=fast: the run directory was made"
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
python3 - "$WORK" <<'PY'
import json, re, sys
w = sys.argv[1]
def peak(run):  # the header's figure and source, and run.json's
    m = re.search(r"peak ([0-9.]+) GFLOP/s \((\w+)\)", open(f"{w}/{run}.out").read())
    assert m, f"{run}: no peak in the header"
    rec = json.load(open(f"{w}/{run}/run.json"))["sessions"][0]["mfu_peak"]
    assert rec["source"] == m.group(2) and abs(rec["flops_per_rank"] / 1e9 - float(m.group(1))) < 0.051, (m.groups(), rec)
    return rec
pa, pb = peak("a"), peak("b")
assert pa["source"] == "measured" and pa["flops_per_rank"] > 1e9, pa
assert pb == {"flops_per_rank": 5e11, "source": "LOOM_PEAK_TFLOPS"}, pb
# MFU x peak / tokens_per_s is the model's FLOPs per token: the same in both runs.
fpt = [r["mfu"] * p["flops_per_rank"] / r["tokens_per_s"]
       for run, p in (("a", pa), ("b", pb)) for r in map(json.loads, open(f"{w}/{run}/metrics.jsonl")) if r["tokens_per_s"] > 0]
assert max(fpt) / min(fpt) < 1.01, (min(fpt), max(fpt))
print(f"MFU peak: measured {pa['flops_per_rank'] / 1e9:.1f} GFLOP/s, given 500; {fpt[0] / 1e6:.2f} MFLOP per token from both")
PY
echo PASS
