# What the sweep tests share (sourced). tiny_lr_sweep writes the shipped example
# configs/sweeps/tiny-lr-asha.yaml (8 trials of configs/tiny.yaml, optim.lr loguniform in
# [1e-4, 3e-2], micro-batches of 4 sequences and 2 of them per step so a trial is quick, warmup 5
# steps, 180 steps at most, val_loss as the metric) with another scheduler and executor:
#   tiny_lr_sweep FILE SCHEDULER EXECUTOR   e.g. "{kind: asha, min_steps: 30, eta: 3}" "{kind: local, parallel: 2}"
# Rungs at 30 and 90 steps: on this recipe a rung inside the warmup or at 20 steps ranks the
# learning rates by how fast they reach the byte-frequency plateau (the largest win), while by 30
# steps the ranking is the final one's (measured: docs/sweeps.md).
tiny_lr_sweep() {
  /usr/bin/python3 - "$SRC/configs/sweeps/tiny-lr-asha.yaml" "$@" <<'PY'
import sys, yaml
shipped, out, scheduler, executor = sys.argv[1:]
spec = yaml.safe_load(open(shipped))
spec["scheduler"], spec["executor"] = yaml.safe_load(scheduler), yaml.safe_load(executor)
yaml.safe_dump(spec, open(out, "w"), sort_keys=False)
PY
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
