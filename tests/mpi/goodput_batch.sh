# train.batch_policy goodput at dp 2 (2 ranks) on the tests' small model (SMALL in
# tests/cli/common.sh; the short one-rank and ZeRO-2 runs below on tiny, whose noise scale is
# estimated by step 5), global batch 16 (the reference the learning rate is for), bounds
# [16, 128], a decision every 20 steps, and the step-time model fixed by LOOM_GOODPUT_TIMING=300:10
# (300 ms per step plus 10 ms per micro-batch round: a machine where the step's fixed cost
# dominates, as with a slow gradient link), so that the decisions depend only on the measured
# noise scale and can be reproduced:
#  - the batch grows as the loss falls (it never shrinks, ends at 4x or more, and each batch's
#    steps have a lower mean loss than the batch before);
#  - every decision is printed and recorded in run.json with its reason; metrics.jsonl logs each
#    step's global_batch; the run trains exactly its budget, train.steps x 16 sequences;
#  - the learning rate is the cosine schedule at (sequences trained / 16) times sqrt(M / 16);
#  - a run stopped at step 40, the decision step where the batch first changes (the decision is
#    taken before the stop's checkpoint, which must record the new batch), and resumed makes the
#    same decisions and the same losses, bit for bit, as the uninterrupted one (the sampler
#    resumes at a batch other than the recipe's, and the resumed half takes the later decisions);
#  - pp 2 x dp 2 makes the same decisions and the dp-2 losses within 1e-6 (to step 102);
#  - on one rank, a last step trimmed to a single micro-batch (nothing smaller to measure the
#    noise scale against) completes;
#  - LOOM_GOODPUT_TIMING is rank 0's on every rank (the resumed half gives rank 1 another one);
#  - under ZeRO-2 the batch changes too (the noise scale from each rank's first micro-batch);
#  - recipes goodput cannot serve are refused at start, naming the key.
#   goodput_batch.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1 LOOM_GOODPUT_TIMING=300:10
common=(--set train.global_batch=16 --set train.batch_policy=goodput --set train.batch_every=20 --set log.every=1
        --set log.eval_every=0)
run() {  # name [extra args]
  local name=$1; shift
  mpi -np 2 -x LOOM_GOODPUT_TIMING -x OMP_NUM_THREADS "$LOOM" train configs/tiny.yaml "${SMALL[@]}" "${common[@]}" \
    --set log.dir="$WORK/$name" "$@" >> "$WORK/$name.out" 2>&1 || { cat "$WORK/$name.out"; fail "$name failed"; }
}
run full
# (Measured: the small model's batch goes 16 -> 64 at step 40 (+23% goodput) and 64 -> 96 at
# step 100 (+3.3%, against the 2% a change needs), 104 steps in all.)
run split --set checkpoint.dir="$WORK/ck" --set train.stop_at_step=40
grep -q "loom: trained 40 steps this session" "$WORK/split.out" || { cat "$WORK/split.out"; fail "the first part did not stop at 40"; }
# The resumed half with another LOOM_GOODPUT_TIMING on rank 1: rank 0's must be used everywhere
# (else the ranks would decide differently, or hang on mismatched collectives).
mpi -np 1 -x OMP_NUM_THREADS -x LOOM_GOODPUT_TIMING "$LOOM" train configs/tiny.yaml "${SMALL[@]}" "${common[@]}" --set log.dir="$WORK/split" \
  --set checkpoint.dir="$WORK/ck" : -np 1 -x OMP_NUM_THREADS env LOOM_GOODPUT_TIMING=1:1000 "$LOOM" train configs/tiny.yaml \
  "${SMALL[@]}" "${common[@]}" --set log.dir="$WORK/split" --set checkpoint.dir="$WORK/ck" >> "$WORK/split.out" 2>&1 ||
  { cat "$WORK/split.out"; fail "the resumed half failed"; }
grep "global batch .* -> " "$WORK/full.out" || { cat "$WORK/full.out"; fail "the batch never changed"; }
python3 - "$WORK" <<'PY'
import json, math, re, sys
w = sys.argv[1]
rows = lambda d: [json.loads(l) for l in open(f"{w}/{d}/metrics.jsonl") if '"step"' in l]
full, split = rows("full"), rows("split")
gb = [r["global_batch"] for r in full]
assert sum(gb) == 300 * 16, f"trained {sum(gb)} sequences, not the budget of 4800"
assert all(b % 16 == 0 and 16 <= b <= 128 for b in gb), gb
# The last step may be trimmed to what the budget leaves; before it the batch only grows.
assert all(a <= b for a, b in zip(gb[:-2], gb[1:-1])), f"the batch shrank: {gb}"
assert gb[0] == 16 and max(gb) >= 64, f"the batch did not grow 4x: {sorted(set(gb))}"
means = []
for b in sorted(set(gb[:-1])):
    losses = [r["loss"] for r in full[:-1] if r["global_batch"] == b]
    means.append((b, sum(losses) / len(losses), len(losses)))
print("batch, mean loss, steps: " + "; ".join(f"{b} {m:.4f} {n}" for b, m, n in means))
assert all(x[1] > y[1] for x, y in zip(means, means[1:])), f"the loss did not fall from batch to batch: {means}"
# The learning rate: cosine over the reference steps (tiny's min 3e-4, warmup 20 and 300 steps;
# the small model's lr 1e-3) at the sequences trained before the step, times sqrt(M / 16).
def sched(p):
    if p < 20: return 1e-3 * (p + 1) / 20
    q = min(1.0, (p - 20) / 280)
    return 3e-4 + 0.5 * (1e-3 - 3e-4) * (1 + math.cos(math.pi * q))
seen = 0
for r in full:
    want = sched(seen / 16) * math.sqrt(r["global_batch"] / 16)
    assert abs(r["lr"] - want) <= 1e-7 * want, (r["step"], r["lr"], want)  # metrics.jsonl: 9 digits
    seen += r["global_batch"]
# Decisions: run.json, with reasons; stdout says each change.
dec = json.load(open(f"{w}/full/run.json"))["sessions"][0]["batch_decisions"]
assert [d["step"] for d in dec] == list(range(20, len(full), 20)), [d["step"] for d in dec]
changes = [d for d in dec if d["to"] != d["from"]]
assert changes and all("goodput" in d["reason"] and d["timing"] == "LOOM_GOODPUT_TIMING" for d in changes), changes
assert all(d["t0_ms"] == 300 and d["t1_ms"] == 10 for d in dec), dec[0]
for d in changes:
    assert gb[d["step"]] == d["to"] or d["step"] + 1 == len(full), (d, gb[d["step"]])
# Stopped at 40 and resumed: the same steps, batches, losses and decisions.
assert len(split) == len(full), (len(split), len(full))
for a, b in zip(full, split):
    assert (a["loss"], a["lr"], a["global_batch"], a["grad_norm"]) == (b["loss"], b["lr"], b["global_batch"], b["grad_norm"]), (a, b)
s = json.load(open(f"{w}/split/run.json"))["sessions"]
assert len(s) == 2 and s[0]["batch_decisions"] + s[1]["batch_decisions"] == dec, "the resumed run decided differently"
print(f"{len(full)} steps for 300 x 16 sequences; batches {sorted(set(gb))}; {len(changes)} changes; "
      f"stop at 40 + resume: identical")
PY
# pp 2 x dp 2 (4 ranks) to step 102, past two changes: the pipeline's in-flight activations are
# allocated for the largest batch and the accumulation changes under it; the same decisions and
# the dp-2 run's losses within 1e-5 (the order of the sums differs between layouts: the
# difference starts at 1e-9 and stays bounded once the batch grows, measured worst 1.1e-7 on an
# AVX2-only Zen 3, 1.7e-6 on an AVX-512 Zen 5, whose sgemm blocks the sums otherwise; a wrong
# pipeline gradient or accumulation is off by 1e-3 within steps; on the tiny recipe, whose loss
# spike near step 20 amplifies it, 1.3e-5 by step 170).
mpi -np 4 -x OMP_NUM_THREADS -x LOOM_GOODPUT_TIMING "$LOOM" train configs/tiny.yaml "${SMALL[@]}" "${common[@]}" --set parallel.pp=2 \
  --set train.stop_at_step=102 --set log.dir="$WORK/pp2" > "$WORK/pp2.out" 2>&1 ||
  # (exit status 4: stopped at train.stop_at_step with no checkpoint.dir, nothing saved, as meant)
  { [ $? = 4 ] || { cat "$WORK/pp2.out"; fail "pp 2 x dp 2 failed"; }; }
python3 - "$WORK" <<'PY'
import json, sys
rows = lambda d: [json.loads(l) for l in open(f"{sys.argv[1]}/{d}/metrics.jsonl") if '"step"' in l]
full, pp2 = rows("full"), rows("pp2")
assert len(pp2) == 102 and [r["global_batch"] for r in pp2] == [r["global_batch"] for r in full[:102]], "pp 2 decided differently"
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(full, pp2))
print(f"pp 2 x dp 2: batches {sorted(set(r['global_batch'] for r in pp2))} as at dp 2, worst relative loss difference {worst:.1e}")
assert worst <= 1e-5, worst
PY
# One rank: 16 -> 24 at step 5 (a fixed cost of 100 s a step makes the largest batch best), then a
# last step of 8 sequences, one micro-batch: it must complete (the noise scale skips that step).
mpi -np 1 env LOOM_GOODPUT_TIMING=100000:1 "$LOOM" train configs/tiny.yaml "${common[@]}" --set train.batch_max=24 --set train.batch_every=5 \
  --set train.steps=7 --set log.dir="$WORK/one" > "$WORK/one.out" 2>&1 || { cat "$WORK/one.out"; fail "one rank with a trimmed last step failed"; }
python3 - "$WORK/one" <<'PY'
import json, sys
gb = [json.loads(l)["global_batch"] for l in open(f"{sys.argv[1]}/metrics.jsonl") if '"step"' in l]
assert gb == [16] * 5 + [24, 8], gb
print(f"one rank: batches {gb}")
PY
# ZeRO-2 at dp 2 (the noise scale from each rank's first micro-batch): with a fixed cost of 100 s a
# step the largest batch is best at the first decision (step 5), so accumulation goes from 1 to 3
# micro-batches under the sharded gradients, and training goes on with a measured noise scale.
mpi -np 2 -x OMP_NUM_THREADS env LOOM_GOODPUT_TIMING=100000:1 "$LOOM" train configs/tiny.yaml "${common[@]}" \
  --set parallel.zero=2 --set train.batch_max=48 --set train.batch_every=5 --set train.steps=10 --set log.dir="$WORK/zero2" \
  > "$WORK/zero2.out" 2>&1 || { cat "$WORK/zero2.out"; fail "goodput under ZeRO-2 failed"; }
python3 - "$WORK/zero2" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl") if '"step"' in l]
gb = [r["global_batch"] for r in rows]
assert gb[:5] == [16] * 5 and set(gb[5:-1]) == {48} and sum(gb) == 160, gb
assert all(math.isfinite(r["grad_norm_small"]) for r in rows), "no small-batch norm under ZeRO-2"
print(f"ZeRO-2: batches {gb}, grad_norm_small measured every step")
PY
# Refused before training (loom config resolves the recipe for a world as loom train does), naming the key.
refuse() {  # what, grep pattern, world, args
  local what=$1 pattern=$2 world=$3; shift 3
  if "$LOOM" config configs/tiny.yaml "${common[@]}" --world "$world" "$@" > "$WORK/bad.out" 2>&1; then
    fail "$what was accepted"
  fi
  grep -q -- "$pattern" "$WORK/bad.out" || { cat "$WORK/bad.out"; fail "$what: the error does not say $pattern"; }
}
refuse "batch_max not a multiple of micro_batch x dp" "train.batch_max=100" 2 --set train.batch_max=100
refuse "batch_min above the reference" "train.batch_min=32" 2 --set train.batch_min=32
refuse "zero 2 with pipeline stages" "parallel.zero=2" 4 --set parallel.zero=2 --set parallel.pp=2
refuse "one rank without 2 micro-batches" "2 x train.micro_batch" 1 --set train.global_batch=8
refuse "no noise scale" "log.noise_scale=false" 2 --set log.noise_scale=false
echo PASS
