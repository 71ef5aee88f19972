# What a run records: run.json (sessions, command, commit, ranks), recipe.yaml, metrics.jsonl,
# TensorBoard event files and Chrome traces; a resumed run continues them (a second session, no
# duplicated steps, a TensorBoard session start). Non-finite steps are skipped and logged; too
# many in a row stop the run with a checkpoint and a failed session in run.json.
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=2
args=(--set train.steps=6 --set log.every=1 --set log.eval_every=0 --set checkpoint.every=3 --set checkpoint.dir="$WORK/ck"
      --set log.dir="$WORK/run" --set log.trace=true --set log.trace_steps=2)
"$LOOM" train configs/tiny.yaml "${args[@]}" --set train.stop_at_step=3 > "$WORK/a.out"
first_trace=$(sha256sum < "$WORK/run/trace_rank0.json")
"$LOOM" train configs/tiny.yaml "${args[@]}" > "$WORK/b.out"
grep -q "resumed from" "$WORK/b.out" || fail "the second session did not resume"
# Each session's traces under their own name: the second never writes over the first's.
[ "$(sha256sum < "$WORK/run/trace_rank0.json")" = "$first_trace" ] || fail "the second session changed trace_rank0.json"
grep -q "wrote Chrome traces $WORK/run/trace_s2_rank\*.json" "$WORK/b.out" || fail "the second session's traces are not trace_s2_rank*.json"
python3 - "$WORK/run" <<'PY'
import json, os, struct, sys
run = sys.argv[1]
doc = json.load(open(f"{run}/run.json"))
s = doc["sessions"]
assert len(s) == 2, f"expected 2 sessions, got {len(s)}"
for x in s:
    assert x["exit_status"] == 0 and x["ended"], x
    assert "loom train configs/tiny.yaml" in x["command"], x["command"]
    assert x["git_commit"] and x["mpi"].startswith("Open MPI"), x
    assert x["ranks"][0]["host"], x["ranks"]
assert s[0]["resumed_from"] is None and s[1]["resumed_from"].endswith("step_00000003"), s
assert s[0]["end_step"] == 3 and s[1]["start_step"] == 3 and s[1]["end_step"] == 6
assert "seq_len: 64" in open(f"{run}/recipe.yaml").read()
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
assert [r["step"] for r in rows] == list(range(6)), [r["step"] for r in rows]
for k in ("loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_ms", "data_wait_ms", "slowest_rank",
          "straggler_lag_ms", "rss_mb", "peak_rss_mb"):
    assert k in rows[-1], f"metrics.jsonl lacks {k}"
# TensorBoard: one event file per session; records well framed; the second starts with a
# session START at step 4 (TensorBoard keeps the points below it: the first session's 1..3, the
# third done before the checkpoint) and then has steps 4..6.
events = sorted(f for f in os.listdir(run) if f.startswith("events.out.tfevents."))
assert len(events) == 2, events
def records(path):
    data, out, at = open(path, "rb").read(), [], 0
    while at < len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        out.append(data[at + 12: at + 12 + n]); at += 12 + n + 4
    return out
steps = {}
for f in events:
    recs = records(f"{run}/{f}")
    assert b"brain.Event:2" in recs[0]
    steps[f] = recs
second = max(steps.values(), key=lambda r: b"\x3a\x02\x08\x01" in r[1])
assert second[1].endswith(b"\x10\x04\x3a\x02\x08\x01"), second[1]
first = min(steps.values(), key=lambda r: b"\x3a\x02\x08\x01" in r[1])
assert sum(b"loss/loss" in r for r in first) == 3
assert sum(b"loss/loss" in r for r in second) == 3
# Chrome traces: the traced steps' phases.
for trace in ("trace_rank0.json", "trace_s2_rank0.json"):
    tr = json.load(open(f"{run}/{trace}"))
    names = {e["name"] for e in tr["traceEvents"]}
    for n in ("data", "forward", "backward", "optimizer", "gradient reduction wait"):
        assert n in names, f"{trace} lacks {n}: {names}"
print("run directory: OK")
PY

# Non-finite gradients at steps 2 and 3: skipped, logged, the run finishes with finite loss.
LOOM_FAULT=nan@2,3 "$LOOM" train configs/tiny.yaml --set train.steps=6 --set log.every=1 --set log.eval_every=0 \
  --set log.dir="$WORK/nan" > "$WORK/nan.out" 2> "$WORK/nan.err"
grep -q "step 2: non-finite gradient norm .* update skipped (1 in a row" "$WORK/nan.err" || fail "nan: not reported: $(cat "$WORK/nan.err")"
python3 - "$WORK/nan/metrics.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r.get("skipped", 0) for r in rows] == [0, 1, 1, 0, 0, 0], rows
assert all(r["loss"] is not None and math.isfinite(r["loss"]) for r in rows)
assert rows[-1]["grad_norm"] is not None and rows[-1]["loss"] < rows[0]["loss"]
PY
# AdamW counts the updates it applies, not the steps (PyTorch's GradScaler and Megatron never
# reach optimizer.step() on a skipped step): after a skipped first step the second is its first
# update, t = 1, where m / sqrt(v) is g / |g| and every weight moves by lr (t = 2 moved them by
# sqrt(1 + beta2) / (1 + beta1) = 0.735 lr). The initial weights are the independent numpy
# writer's; the checkpoints record the count (0 after the skipped step, 1 after the next), and a
# resume takes it from there:
#  - from a copy of step 1: step 2 bit for bit as the uninterrupted run's;
#  - from a copy whose manifest lacks the count (an older checkpoint): every step counted, as then
#    (the weights move by 0.735 lr);
#  - a count above the step is damage: the resume falls back past that checkpoint, naming it.
/usr/bin/python3 "$SRC/tests/pretrained/gpt2_numpy.py" make-hf "$WORK/init" --layers 2 --heads 2 --embd 64 --vocab 257 \
  --positions 32 --seed 3
skipped=(configs/tiny.yaml --set model.n_layer=2 --set model.n_head=2 --set model.d_model=64 --set model.seq_len=32
         --set model.init_from="$WORK/init" --set optim.weight_decay=0 --set train.steps=2 --set log.every=1
         --set log.eval_every=0 --set checkpoint.every=1)
LOOM_FAULT=nan@1 "$LOOM" train "${skipped[@]}" --set log.dir="$WORK/skip1" --set checkpoint.dir="$WORK/skip1ck" \
  > "$WORK/skip1.out" 2>&1 || { cat "$WORK/skip1.out"; fail "skip1: training failed"; }
"$LOOM" export "$WORK/skip1ck/step_00000002" --out "$WORK/skip1hf" > /dev/null
for v in resumed old damaged; do
  mkdir "$WORK/skip_$v"
  cp -r "$WORK/skip1ck/step_00000001" "$WORK/skip_$v/"
done
python3 - "$WORK" <<'PY'
import json, shutil, sys
w = sys.argv[1]
def edit(path, change):
    m = json.load(open(path))
    change(m)
    json.dump(m, open(path, "w"), indent=2)
edit(f"{w}/skip_old/step_00000001/manifest.json", lambda m: m.pop("optimizer"))
# damaged: a step 2 whose count (5) cannot be, beside a good step 1
shutil.copytree(f"{w}/skip1ck/step_00000002", f"{w}/skip_damaged/step_00000002")
edit(f"{w}/skip_damaged/step_00000002/manifest.json", lambda m: m["optimizer"].update(updates=5))
PY
for v in resumed old; do
  "$LOOM" train "${skipped[@]}" --set log.dir="$WORK/skip_$v.run" --set checkpoint.dir="$WORK/skip_$v" \
    > "$WORK/skip_$v.out" 2>&1 || { cat "$WORK/skip_$v.out"; fail "skip_$v: the resume failed"; }
  "$LOOM" export "$WORK/skip_$v/step_00000002" --out "$WORK/skip_$v.hf" > /dev/null
done
cmp -s "$WORK/skip1hf/model.safetensors" "$WORK/skip_resumed.hf/model.safetensors" ||
  fail "resumed after the skipped step: step 2 differs from the uninterrupted run's"
"$LOOM" train "${skipped[@]}" --set train.steps=3 --set log.dir="$WORK/skip_damaged.run" \
  --set checkpoint.dir="$WORK/skip_damaged" > "$WORK/skip_damaged.out" 2>&1 ||
  { cat "$WORK/skip_damaged.out"; fail "skip_damaged: the resume failed"; }
grep -q "optimizer.updates 5 is not a count from 0 to the step 2 (damaged)" "$WORK/skip_damaged.out" ||
  fail "a count above the step was not reported: $(grep -i step_00000002 "$WORK/skip_damaged.out")"
grep -q "resumed from $WORK/skip_damaged/step_00000001 " "$WORK/skip_damaged.out" ||
  fail "a count above the step: not resumed from step 1: $(grep resumed "$WORK/skip_damaged.out")"
/usr/bin/python3 - "$WORK" "$SRC/tests/pretrained" <<'PY'
import json, sys
import numpy as np
w = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from gpt2_numpy import read_safetensors
updates = [json.load(open(f"{w}/skip1ck/step_{s:08d}/manifest.json"))["optimizer"]["updates"] for s in (1, 2)]
assert updates == [0, 1], f"manifests' optimizer.updates after a skipped and a good step: {updates}"
rows = [json.loads(l) for l in open(f"{w}/skip1/metrics.jsonl")]
assert [r.get("skipped", 0) for r in rows] == [1, 0], rows
before, _ = read_safetensors(f"{w}/init/model.safetensors")
for run, want in (("skip1hf", 1.0), ("skip_old.hf", 1.95 ** 0.5 / 1.9)):  # tiny: betas 0.9, 0.95
    after, _ = read_safetensors(f"{w}/{run}/model.safetensors")
    for name in ("transformer.h.0.mlp.c_fc.weight", "transformer.wpe.weight"):
        moved = np.median(np.abs(after[name] - before[name])) / rows[1]["lr"]
        print(f"{run}: the update after a skipped step moved {name} by {moved:.5f} lr (median), expected {want:.5f}")
        assert abs(moved / want - 1) < 0.01, f"{run}: {name} moved by {moved:.4f} lr, expected {want:.4f}"
PY
# Three in a row (train.max_nonfinite_steps = 3): the run stops, exit 1, with a checkpoint of
# the last good state and the failure in run.json.
set +e
LOOM_FAULT=nan@2,3,4 "$LOOM" train configs/tiny.yaml --set train.steps=8 --set log.every=1 --set log.eval_every=0 \
  --set log.dir="$WORK/nan3" --set checkpoint.dir="$WORK/nan3ck" > "$WORK/nan3.out" 2> "$WORK/nan3.err"; rc=$?
set -e
[ "$rc" = 1 ] || fail "three non-finite steps: exit status $rc, expected 1"
grep -q "3 steps in a row (to step 4) had a non-finite" "$WORK/nan3.err" || fail "nan3: message: $(cat "$WORK/nan3.err")"
[ -f "$WORK/nan3ck/step_00000004/manifest.json" ] || fail "nan3: no checkpoint of the last good state"
python3 -c "
import json, sys
s = json.load(open('$WORK/nan3/run.json'))['sessions'][-1]
assert s['exit_status'] == 1 and 'non-finite' in s['error'], s
assert s['end_step'] == 4, s  # the step it stopped at (was -1 for every failed session)
"
# Plots: two runs into one PNG.
/usr/bin/python3 "$SRC/scripts/plot_metrics.py" "$WORK/run" "$WORK/nan" -o "$WORK/runs.png"
[ "$(head -c 8 "$WORK/runs.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "plot_metrics.py wrote no PNG"
echo PASS
