# The sweep spec the sweep tests share (sourced): 8 trials of configs/tiny.yaml with optim.lr
# loguniform in [1e-4, 3e-2], micro-batches of 4 sequences and 2 of them per step (so a trial is
# quick), warmup 5 steps, 180 steps at most, val_loss (8 batches) as the metric.
#   tiny_lr_sweep FILE SCHEDULER EXECUTOR   e.g. "{kind: asha, min_steps: 30, eta: 3}" "{kind: local, parallel: 2}"
# Rungs at 30 and 90 steps: on this recipe a rung inside the warmup or at 20 steps ranks the
# learning rates by how fast they reach the byte-frequency plateau (the largest win), while by 30
# steps the ranking is the final one's (measured: docs/sweeps.md).
tiny_lr_sweep() {
  cat > "$1" <<SPEC
recipe: configs/tiny.yaml
set: [train.micro_batch=4, train.global_batch=8, log.every=1, log.eval_batches=8, optim.warmup_steps=5]
metric: val_loss
max_steps: 180
scheduler: $2
space:
  optim.lr: {loguniform: [1.0e-4, 3.0e-2]}
samples: 8
seed: 0
executor: $3
SPEC
}

# Every trial's sessions (run.json) chain: each starts where the one before ended and ended 0
# (nothing trained twice, nothing lost), and the steps add up to what state.json says it ran.
check_no_step_trained_twice() {
  /usr/bin/python3 - "$1" <<'PY'
import json, os, sys
out = sys.argv[1]
st = json.load(open(f"{out}/state.json"))
total = 0
for t in st["trials"]:
    if t["status"] == "pending":
        continue
    s = json.load(open(f"{out}/trial_{t['id']}/run/run.json"))["sessions"]
    spans = [(x["start_step"], x["end_step"], x["exit_status"]) for x in s]
    for (a0, a1, _), (b0, b1, _) in zip(spans, spans[1:]):
        assert b0 == a1, f"trial {t['id']}: a session started at {b0}, the one before ended at {a1}: {spans}"
    assert spans[0][0] == 0 and spans[-1][1] == t["steps"], (t["id"], spans, t["steps"])
    assert all(x[2] in (0, 75) for x in spans), (t["id"], spans)
    total += t["steps"]
print(f"{out}: every trial's sessions chain without overlap; {total} steps in all")
PY
}
