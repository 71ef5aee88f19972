# The gradient noise scale's small-batch norm (log.noise_scale; engine/optim/noise_scale.hpp)
# against a brute-force computation on the tiny recipe, with optim.lr 0 so the weights stay the
# initial ones step after step:
#  - dp 2 (global batch 32): grad_norm_small^2 must be the mean of the squared gradient norms of
#    the two halves of the batch, which a single rank trained with global batch 16 logs as the
#    grad_norm of its steps 1 and 2 (dp rank r's share is the r-th contiguous part of the batch);
#    and the same under tp 2, pp 2 and ZeRO-1 (the norms are the replica's whole gradient,
#    counted once over tp, pp and the tied embedding);
#  - one rank with 4 micro-batches of 8: grad_norm_small is the first micro-batch's gradient
#    norm, which a single rank with global batch 8 logs at step 1;
#  - ZeRO-2/3 at dp 2 (2 micro-batches of 8 per rank): grad_norm_small^2 is the mean over the
#    ranks of their first micro-batch's squared gradient norm, i.e. of the batch's first and third
#    quarters, which a single rank with global batch 8 logs at steps 1 and 3 (also under tp 2, and
#    with micro-batches of 16, where the first micro-batch is the rank's whole half); with
#    pipeline stages it is not measured, and Loom says so;
#  - B_simple is logged (metrics.jsonl) once training moves, and the progress line shows it.
#   noise_scale_brute_force.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
run() {  # name np steps overrides...
  local name=$1 np=$2 steps=$3; shift 3
  mpi -np "$np" "$LOOM" train configs/tiny.yaml --set train.steps="$steps" --set log.every=1 --set log.eval_every=0 \
    --set optim.lr=0 --set optim.min_lr=0 --set log.dir="$WORK/$name" "$@" > "$WORK/$name.out" 2>&1 ||
    { cat "$WORK/$name.out"; fail "$name failed"; }
}
run halves 1 2 --set train.global_batch=16
run dp2 2 1
run tp2_dp2 4 1 --set parallel.tp=2
run pp2_dp2 4 1 --set parallel.pp=2
run dp2_zero1 2 1 --set parallel.zero=1
run micro0 1 1 --set train.global_batch=8
run accum4 1 1
run quarters 1 3 --set train.global_batch=8
run dp2_zero2 2 1 --set parallel.zero=2
run tp2_dp2_zero3 4 1 --set parallel.zero=3 --set parallel.tp=2
run dp2_zero3_micro16 2 1 --set parallel.zero=3 --set train.micro_batch=16
# B_simple once the weights move (the small model's learning rate), and its progress-line field.
# (The tests' small model, SMALL in common.sh, for these 30-step runs.)
mpi -np 2 "$LOOM" train configs/tiny.yaml "${SMALL[@]}" --set train.steps=30 --set log.every=10 --set log.eval_every=0 \
  --set log.dir="$WORK/moving" > "$WORK/moving.out" 2>&1 || { cat "$WORK/moving.out"; fail "moving failed"; }
grep -q "B_simple [0-9]" "$WORK/moving.out" || { cat "$WORK/moving.out"; fail "no B_simple on the progress line"; }
# The moving averages are in the checkpoint: stopped at step 15 and resumed, the same B_simple.
for stop in 15 0; do
  mpi -np 2 "$LOOM" train configs/tiny.yaml "${SMALL[@]}" --set train.steps=30 --set log.every=10 --set log.eval_every=0 \
    --set log.dir="$WORK/resumed" --set checkpoint.dir="$WORK/ck" --set train.stop_at_step=$stop > "$WORK/resumed.out" 2>&1 ||
    { cat "$WORK/resumed.out"; fail "resumed run failed"; }
done
mpi -np 4 "$LOOM" train configs/tiny.yaml --set train.steps=2 --set parallel.zero=2 --set parallel.pp=2 \
  --set log.dir="$WORK/z2pp2" --set log.eval_every=0 > "$WORK/z2pp2.out" 2>&1 || true
python3 - "$WORK" <<'PY'
import json, math, sys
w = sys.argv[1]
rows = lambda n: [json.loads(l) for l in open(f"{w}/{n}/metrics.jsonl") if '"step"' in l]
halves = rows("halves")
want = (halves[0]["grad_norm"] ** 2 + halves[1]["grad_norm"] ** 2) / 2
for name in ("dp2", "tp2_dp2", "pp2_dp2", "dp2_zero1"):
    r = rows(name)[0]
    got = r["grad_norm_small"] ** 2
    print(f"{name}: |G_small|^2 {got:.8g} vs the halves' mean {want:.8g} (rel {abs(got - want) / want:.1e}); "
          f"|G_big| {r['grad_norm']:.6g}")
    assert abs(got - want) <= 1e-5 * want, name
quarters = rows("quarters")
want = (quarters[0]["grad_norm"] ** 2 + quarters[2]["grad_norm"] ** 2) / 2
for name in ("dp2_zero2", "tp2_dp2_zero3"):
    r = rows(name)[0]
    got = r["grad_norm_small"] ** 2
    print(f"{name}: |G_small|^2 {got:.8g} vs quarters 1 and 3's mean {want:.8g} (rel {abs(got - want) / want:.1e})")
    assert abs(got - want) <= 1e-5 * want, name
want = (halves[0]["grad_norm"] ** 2 + halves[1]["grad_norm"] ** 2) / 2
got = rows("dp2_zero3_micro16")[0]["grad_norm_small"] ** 2
print(f"dp2_zero3_micro16: |G_small|^2 {got:.8g} vs the halves' mean {want:.8g} (rel {abs(got - want) / want:.1e})")
assert abs(got - want) <= 1e-5 * want
micro = rows("micro0")[0]["grad_norm"]
got = rows("accum4")[0]["grad_norm_small"]
print(f"one rank, 4 micro-batches: |G_small| {got:.8g} vs micro-batch 0 alone {micro:.8g}")
assert abs(got - micro) <= 1e-5 * micro
moving = rows("moving")
b = [r.get("b_simple") for r in moving]
print(f"B_simple over 30 steps at dp 2 (every 10th step): {b}")
assert all(x is not None and math.isfinite(x) for x in b[1:]), b
again = [r["b_simple"] for r in rows("resumed")]
assert again[-1] == b[-1], f"B_simple after a resume at step 15: {again[-1]} != uninterrupted {b[-1]}"
print(f"stopped at step 15 and resumed: B_simple at step 30 {again[-1]} == uninterrupted")
PY
grep -q "noise scale is not measured here" "$WORK/z2pp2.out" ||
  { cat "$WORK/z2pp2.out"; fail "ZeRO-2 with pp 2 did not say the noise scale is not measured"; }
echo PASS
