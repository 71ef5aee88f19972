# Parallel layouts change nothing but the speed: each layout given as "name:ranks:overrides"
# trains the tests' small model (SMALL in tests/cli/common.sh: tiny at half its width and
# sequence length) 50 steps (LAYOUT_STEPS) and must give the single-rank loss and grad norm at
# every step within 1e-6 relative (the same global batch and the same global initial weights; only
# how the work is split changes, so only the summation order differs: measured at most 7.3e-9 on
# the loss and 6.0e-8 on the grad norm over every layout here). A layout with parallel.zero=1 must
# also hold 1/dp of the optimizer state of a replicated-optimizer layout with the same tp and pp.
#   layouts_match_single_rank.sh LOOM SRC MPIEXEC "dp2:2:" "tp2:2:--set parallel.tp=2" ...
# LAYOUT_PRECISION=bf16 runs every layout (the single rank included) in bf16, where another split
# of a matmul (or a bf16 gradient reduction) rounds differently and the trajectories drift apart
# (measured: 2e-5 relative on the first 15 losses, 4e-4 on the mean of the last 10), so bf16 is
# held to: every loss of the first 15 steps within LAYOUT_TOL_LOSS (relative), and the mean of
# the last 10 losses within LAYOUT_TOL_END.
source "$(dirname "$0")/../cli/common.sh"
shift 3
corpus
cd "$SRC"
export OMP_NUM_THREADS=1  # several ranks share 2 cores
export LAYOUT_STEPS=${LAYOUT_STEPS:-50}
run() {  # name np overrides...
  local name=$1 np=$2; shift 2
  mpi -np "$np" "$LOOM" train configs/tiny.yaml "${SMALL[@]}" --set train.steps="$LAYOUT_STEPS" --set log.every=1 --set log.eval_every=0 \
    --set train.precision="${LAYOUT_PRECISION:-fp32}" \
    --set parallel.bucket_mb=0.25 --set log.dir="$WORK/$name" "$@" > "$WORK/$name.out" 2>&1 ||
    { cat "$WORK/$name.out"; fail "$name failed"; }
  grep -o "optimizer state [0-9.]* MB per rank" "$WORK/$name.out" | head -1 | sed "s/^/$name: /"
  grep "replicated parameters" "$WORK/$name.out" | sed "s/^/$name: /" || true
}
run single 1
names=()
for layout in "$@"; do
  IFS=: read -r name np overrides <<<"$layout"
  # shellcheck disable=SC2086
  run "$name" "$np" $overrides
  names+=("$name")
  printf '%s\t%s\t%s\n' "$name" "$np" "$overrides" >> "$WORK/layouts.tsv"
done
python3 - "$WORK" "${names[@]}" <<'PY'
import json, os, re, sys
work, names = sys.argv[1], sys.argv[2:]
def state_mb(name):  # rank 0's optimizer state at the end, from run.json (the header rounds to 0.01 MB)
    return json.load(open(f"{work}/{name}/run.json"))["sessions"][-1]["memory_end"][0]["optimizer_mb"]
def load(name):
    return [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
steps = int(os.environ["LAYOUT_STEPS"])
ref = load("single")
assert len(ref) == steps
if os.environ.get("LAYOUT_PRECISION", "fp32") != "fp32":
    tol, tol_end = float(os.environ["LAYOUT_TOL_LOSS"]), float(os.environ["LAYOUT_TOL_END"])
    end = lambda rows: sum(r["loss"] for r in rows[-10:]) / 10
    for name in names:
        rows = load(name)
        assert len(rows) == steps, name
        early = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(ref[:15], rows[:15]))
        late = abs(end(rows) - end(ref)) / end(ref)
        print(f"{name}: worst relative loss difference over steps 1-15 {early:.1e} (tolerance {tol:g}); "
              f"mean of the last 10 steps {end(rows):.4f} vs single-rank {end(ref):.4f} ({late:.1e}, tolerance {tol_end:g})")
        assert early <= tol and late <= tol_end, f"{name} does not match the single-rank run"
    exact = []  # no per-step comparison in bf16; the ZeRO-1 state check below still runs
else:
    exact = names
for name in exact:
    rows = load(name)
    assert len(rows) == steps, name
    worst = {"loss": 0.0, "grad_norm": 0.0}
    # 1e-6 relative: more than 10x the summation-order differences measured (see the header). The
    # tiny recipe itself at its lr of 3e-3 spikes near step 20, after which the same differences
    # grow to 1e-5 of the grad norm, and other shapes at that lr turn chaotic (1e-3 by step 30):
    # the small model's lr of 1e-3 keeps the comparison about the layouts, not about chaos.
    tol = {"loss": float(os.environ.get("LAYOUT_TOL_LOSS", 1e-6)), "grad_norm": float(os.environ.get("LAYOUT_TOL_NORM", 1e-6))}
    for a, b in zip(ref, rows):
        for k in ("loss", "grad_norm"):
            rel = abs(a[k] - b[k]) / abs(a[k])
            worst[k] = max(worst[k], rel)
            assert rel <= tol[k], f"{name} step {a['step']} {k}: {b[k]} vs single-rank {a[k]} (rel {rel:.2e})"
    print(f"{name}: {steps} steps match the single rank; worst relative difference: loss {worst['loss']:.1e}, "
          f"grad norm {worst['grad_norm']:.1e}")
def degree(key, overrides):
    m = re.search(rf"parallel.{key}=(\d+)", overrides)
    return int(m.group(1)) if m else 1
layouts = [line.rstrip("\n").split("\t") for line in open(f"{work}/layouts.tsv")]
# The straggler view: the slowest rank's lag behind the median step time. With 2 ranks the median
# is their mean, so any difference between them shows (the upper middle alone gave 0 always).
for name, np, overrides in layouts:
    lags = [r["straggler_lag_ms"] for r in load(name)]
    assert min(lags) >= 0, f"{name}: negative straggler_lag_ms"
    assert int(np) == 1 or max(lags) > 0, f"{name}: straggler_lag_ms is 0 at every step of {np} ranks"
for name, np, overrides in layouts:
    if "parallel.zero=1" not in overrides:
        continue
    tp, pp = degree("tp", overrides), degree("pp", overrides)
    dp = int(np) // (tp * pp)
    # Against the replicated optimizer of the same tp/pp slice (rank 0's; the single rank's when
    # tp = pp = 1).
    same = lambda o: degree("tp", o) == tp and degree("pp", o) == pp and "zero=1" not in o
    ref = "single" if tp == pp == 1 else next(n for n, _, o in layouts if same(o))
    want = state_mb(ref) / dp
    print(f"{name}: ZeRO-1 optimizer state {state_mb(name):.4f} MB per rank = {ref}'s {state_mb(ref):.4f} MB / dp {dp}")
    assert abs(state_mb(name) - want) / want < 0.02, f"{name}: expected about {want:.4f} MB"
PY
echo PASS
