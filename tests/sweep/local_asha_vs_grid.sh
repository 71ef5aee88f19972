# An ASHA sweep of 8 trials of configs/tiny.yaml (optim.lr loguniform 1e-4..3e-2) on this
# machine, and the full grid of the same 8 trials (each to 180 steps), both here:
#  - ASHA trains at most 45% of the grid's steps, and its best val_loss is within 2% of the
#    grid's best; the trial it trains to the end gets the grid's val_loss for that trial bit for
#    bit (promotions resume from the checkpoint at the rung; they do not retrain);
#  - its controller is killed (SIGKILL) mid-sweep and started again: the sweep finishes, segments
#    that outlived the controller are waited for, and no step is trained twice (run.json);
#  - results.tsv, curves.png and best_recipe.yaml are written; `loom config` reads the recipe.
#   local_asha_vs_grid.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
source "$(dirname "$0")/tiny_lr_sweep.sh"
corpus
LOOM=$(readlink -f "$LOOM")
cd "$SRC"
export OMP_NUM_THREADS=1
local2="{kind: local, parallel: 2, ranks: 1, threads: 1}"
tiny_lr_sweep "$WORK/grid.yaml" "{kind: asha, min_steps: 180}" "$local2"
tiny_lr_sweep "$WORK/asha.yaml" "{kind: asha, min_steps: 30, eta: 3}" "$local2"

t0=$(date +%s.%N)
scripts/sweep run "$WORK/asha.yaml" --out "$WORK/asha" --loom "$LOOM" > "$WORK/asha1.log" 2>&1 &
pid=$!
# Kill it once 4 segments have ended (at least one trial is then usually training).
for _ in $(seq 600); do
  [ "$(grep -c '(paused)' "$WORK/asha1.log" 2>/dev/null)" -ge 4 ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
kill -9 $pid 2>/dev/null || fail "the controller ended before it could be killed: $(tail -5 "$WORK/asha1.log")"
wait $pid 2>/dev/null || true
echo "killed the controller after: $(grep -c '(paused)' "$WORK/asha1.log") segments"
scripts/sweep run "$WORK/asha.yaml" --out "$WORK/asha" --loom "$LOOM" > "$WORK/asha2.log" 2>&1 ||
  { cat "$WORK/asha2.log"; fail "the restarted sweep failed"; }
t1=$(date +%s.%N)
grep "sweep: resumed" "$WORK/asha2.log"
scripts/sweep run "$WORK/grid.yaml" --out "$WORK/grid" --loom "$LOOM" > "$WORK/grid.log" 2>&1 ||
  { cat "$WORK/grid.log"; fail "the grid failed"; }
t2=$(date +%s.%N)
cat "$WORK/asha2.log" | sed -n '/^trial/,$p'
check_no_step_trained_twice "$WORK/asha"
for f in results.tsv curves.png best_recipe.yaml; do [ -s "$WORK/asha/$f" ] || fail "no $f"; done
"$LOOM" config "$WORK/asha/best_recipe.yaml" > "$WORK/best.txt" || fail "loom config cannot read best_recipe.yaml"
# The trials' schedule: train.steps is the sweep's max_steps (180), not the recipe's 300.
best_steps=$(awk '/^train:/{t=1; next} /^[^ ]/{t=0} t && /^  steps:/{print $2; exit}' "$WORK/best.txt")
[ "$best_steps" = 180 ] || fail "best_recipe.yaml: train.steps is $best_steps, not the sweep's max_steps 180"
/usr/bin/python3 - "$WORK" "$t0" "$t1" "$t2" <<'PY'
import json, sys
w, t0, t1, t2 = sys.argv[1], *map(float, sys.argv[2:])
a = json.load(open(f"{w}/asha/state.json"))["trials"]
g = json.load(open(f"{w}/grid/state.json"))["trials"]
assert all(t["status"] == "done" and t["steps"] == 180 for t in g), [(t["status"], t["steps"]) for t in g]
assert [t["params"] for t in a] == [t["params"] for t in g], "the two sweeps have different trials"
steps_a, steps_g = sum(t["steps"] for t in a), sum(t["steps"] for t in g)
grid_best = min(t["metrics"][-1][1] for t in g)
done = [t for t in a if t["status"] == "done"]
assert done, "ASHA trained no trial to the end"
best = min(done, key=lambda t: t["metrics"][-1][1])
print(f"ASHA: {steps_a} steps ({100 * steps_a / steps_g:.0f}% of the grid's {steps_g}), {t1 - t0:.1f} s (with a kill and "
      f"a restart) vs the grid's {t2 - t1:.1f} s; best val_loss {best['metrics'][-1][1]:.5f} (trial {best['id']}) vs "
      f"the grid's {grid_best:.5f}")
assert steps_a <= 0.45 * steps_g, f"ASHA trained {steps_a} steps, more than 45% of {steps_g}"
assert best["metrics"][-1][1] <= 1.02 * grid_best, "ASHA's best is not within 2% of the grid's"
for t in done:
    assert t["metrics"][-1][1] == g[t["id"]]["metrics"][-1][1], \
        f"trial {t['id']}: ASHA's val_loss at 180 steps {t['metrics'][-1][1]} != the grid's {g[t['id']]['metrics'][-1][1]}"
stopped = [t for t in a if t["status"] == "stopped"]
assert stopped and all(t["why"].startswith("ASHA: not in the best 1/3 at") for t in stopped), stopped
rows = [l.split("\t") for l in open(f"{w}/asha/results.tsv").read().splitlines()]
assert rows[0][:4] == ["trial", "params", "steps", "best_val_loss"] and len(rows) == 9, rows[0]
assert int(rows[1][0]) == best["id"], "results.tsv does not put the best trial first"
lr = next(l for l in open(f"{w}/best.txt") if l.strip().startswith("lr:")).split()[1]
assert abs(float(lr) / best["params"]["optim.lr"] - 1) < 1e-6, (lr, best["params"])
PY
echo PASS
