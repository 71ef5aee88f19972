# Population-based training on this machine: 4 trials of configs/tiny.yaml (optim.lr loguniform
# 1e-3..2e-2), generations of 20 steps up to 60, the worst quarter (1 trial) copying a top trial's
# checkpoint at steps 20 and 40 and perturbing its learning rate. Checks, for every copy in the
# lineage: the copied checkpoint is the donor's of that step; the exploited trial's loss at that
# step equals the donor's bit for bit (same weights, same data position: it continues from the
# donor's state, not its own); its learning rate there is the donor's perturbed (x0.8 or x1.2 above min_lr); its own
# earlier checkpoints are still there; the run continues (loss finite, falling).
#   local_pbt.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
corpus
LOOM=$(readlink -f "$LOOM")
cd "$SRC"
export OMP_NUM_THREADS=1
cat > "$WORK/pbt.yaml" <<SPEC
recipe: configs/tiny.yaml
set: [train.micro_batch=4, train.global_batch=8, log.every=1, log.eval_batches=4, optim.warmup_steps=5]
max_steps: 60
scheduler: {kind: pbt, interval: 20, quantile: 0.25}
space:
  optim.lr: {loguniform: [1.0e-3, 2.0e-2]}
samples: 4
seed: 1
executor: {kind: local, parallel: 2, ranks: 1, threads: 1}
SPEC
scripts/sweep run "$WORK/pbt.yaml" --out "$WORK/pbt" --loom "$LOOM" > "$WORK/pbt.log" 2>&1 ||
  { cat "$WORK/pbt.log"; fail "the PBT sweep failed"; }
grep "PBT at step" "$WORK/pbt.log" || fail "no checkpoint was copied"
sed -n '/^trial/,$p' "$WORK/pbt.log"
/usr/bin/python3 - "$WORK/pbt" <<'PY'
import json, math, os, sys
out = sys.argv[1]
trials = json.load(open(f"{out}/state.json"))["trials"]
def rows(t):
    return {r["step"]: r for r in map(json.loads, open(f"{out}/trial_{t}/run/metrics.jsonl")) if "loss" in r}
copies = [(t["id"], e) for t in trials for e in t["lineage"]]
assert sorted(e["step"] for _, e in copies) == [20, 40], copies  # one copy per generation
assert all(t["status"] == "done" and t["steps"] == 60 for t in trials), [(t["status"], t["steps"]) for t in trials]
for tid, e in copies:
    s, donor = e["step"], e["donor"]
    assert e["checkpoint"] == f"trial_{donor}/" + ("run/checkpoints" if not any(
        x["step"] < s for x in trials[donor]["lineage"]) else f"ckpt_g{max(x['step'] for x in trials[donor]['lineage'] if x['step'] < s)}") + f"/step_{s:08d}", e
    copied = f"{out}/trial_{tid}/ckpt_g{s}/step_{s:08d}"
    assert os.path.isdir(copied), copied
    mine, theirs = rows(tid), rows(donor)
    # Row `s` is the step that starts from the checkpoint of step s (metrics count from 0).
    assert mine[s]["loss"] == theirs[s]["loss"], (tid, donor, s, mine[s]["loss"], theirs[s]["loss"])
    assert mine[s - 1]["loss"] != theirs[s - 1]["loss"], "the two trials were the same before the copy"
    # The schedule (warmup, then cosine from the peak to min_lr 3e-4, configs/tiny.yaml) scales
    # lr - min_lr with peak - min_lr: the new peak is the donor's times 0.8 or 1.2.
    m, peak = 3e-4, e["after"]["optim.lr"]
    ratio = (mine[s]["lr"] - m) / (theirs[s]["lr"] - m)
    assert any(math.isclose(ratio, (peak - m) / (peak / f - m), rel_tol=1e-5) for f in (0.8, 1.2)), ratio
    first_dir = f"{out}/trial_{tid}/run/checkpoints/step_{20:08d}"
    assert os.path.isdir(first_dir), f"trial {tid}'s own checkpoint {first_dir} is gone"
    print(f"trial {tid} copied trial {donor}'s checkpoint at step {s}: loss there {mine[s]['loss']:.5f} == the donor's; "
          f"lr {theirs[s]['lr']:.3e} -> {mine[s]['lr']:.3e}; loss at 59: {mine[59]['loss']:.4f}")
    assert math.isfinite(mine[59]["loss"]) and mine[59]["loss"] < mine[s]["loss"] + 0.5
PY
[ -s "$WORK/pbt/curves.png" ] && [ -s "$WORK/pbt/results.tsv" ] || fail "no curves.png or results.tsv"
echo PASS
