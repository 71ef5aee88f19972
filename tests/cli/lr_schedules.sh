# The learning-rate schedules (optim.lr_decay: cosine, linear, wsd with each of its four cooldown shapes,
# inverse_sqrt down to its floor, constant; optim.decay_steps before train.steps) as runs apply them: every step's logged lr
# against an independent transcription of the formulas in docs/recipes.md (the shapes Megatron's
# and torchtitan's, the step conventions Loom's; metrics.jsonl's step is the 0-based index i, the
# progress line's step i + 1; metrics.jsonl holds 9 significant digits). Then WSD's use: a run stopped in its stable phase and resumed with a longer
# train.steps goes on at the same rate, says so, and cools down at the new end; and a cooldown
# branched off its checkpoint into directories of its own leaves the long run's untouched.
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
BASE=(configs/tiny.yaml "${SMALL[@]}" --set train.global_batch=8 --set log.every=1 --set log.eval_every=0
      --set log.tensorboard=false --set optim.warmup_steps=3)
run() {
  local name=$1
  shift
  mpi -np 1 "$LOOM" train "${BASE[@]}" --set log.dir="$WORK/$name" "$@" > "$WORK/$name.out" 2>&1 ||
    { rc=$?; cat "$WORK/$name.out"; fail "$name: exit status $rc"; }
}
run cosine --set train.steps=14 --set optim.decay_steps=10
run linear --set train.steps=14 --set optim.lr_decay=linear
run wsd_linear --set train.steps=14 --set optim.lr_decay=wsd --set optim.wsd_decay_steps=5
run wsd_cosine --set train.steps=14 --set optim.lr_decay=wsd --set optim.wsd_decay_steps=5 --set optim.wsd_shape=cosine
run wsd_sqrt --set train.steps=14 --set optim.lr_decay=wsd --set optim.wsd_shape=sqrt  # auto: (14-3)/5 = 2
run wsd_exp --set train.steps=14 --set optim.lr_decay=wsd --set optim.wsd_decay_steps=6 --set optim.wsd_shape=exponential
run constant --set train.steps=14 --set optim.lr_decay=constant
# min_lr 5e-4: the floor from 0-based step 3 (1e-3 / 5e-4)^2 = 12 on.
run inv_sqrt --set train.steps=14 --set optim.lr_decay=inverse_sqrt --set optim.min_lr=5e-4
grep -qF "loom: learning rate: warmup 3 steps to 0.001, then falling as 1/sqrt(step) from 0.001 to the floor optim.min_lr=0.0005 at step 13, held there" "$WORK/inv_sqrt.out" ||
  { grep "learning rate" "$WORK/inv_sqrt.out"; fail "inverse_sqrt: the header does not describe the schedule"; }
grep -q "loom: learning rate: warmup 3 steps to 0.001, then stable at 0.001 through step 10, then linear down to 0.0003, reached after step 14" "$WORK/wsd_linear.out" ||
  { grep "learning rate" "$WORK/wsd_linear.out"; fail "wsd: the header does not describe the schedule"; }
# The resumable WSD run: stable through step 19 of 20 (cooldown 2), stopped at 8, resumed with 30 steps.
run wsd_a --set train.steps=20 --set optim.lr_decay=wsd --set optim.wsd_decay_steps=2 --set checkpoint.dir="$WORK/ck" \
  --set train.stop_at_step=8
mpi -np 1 "$LOOM" train "${BASE[@]}" --set log.dir="$WORK/wsd_a" --set train.steps=30 --set optim.lr_decay=wsd \
  --set optim.wsd_decay_steps=2 --set checkpoint.dir="$WORK/ck" > "$WORK/wsd_b.out" 2>&1 ||
  { rc=$?; cat "$WORK/wsd_b.out"; fail "the WSD resume: exit status $rc"; }
for line in "loom: resuming: train.steps is 30, the checkpoint's run had 20: the new value applies from step 9" \
            "loom: resuming: the learning rate at step 9 is 0.001, as the checkpoint's schedule had it; the schedule now: warmup 3 steps to 0.001, then stable at 0.001 through step 29"; do
  grep -qF "$line" "$WORK/wsd_b.out" || { grep resuming "$WORK/wsd_b.out"; fail "the WSD resume does not say: $line"; }
done
# A cooldown branched off the long run's step-8 checkpoint into its own directories: steps 9-11
# cool down (train.steps 11, wsd_decay_steps 3); the long run's checkpoints are left as they were.
ls "$WORK/ck" > "$WORK/ck_before"
mpi -np 1 "$LOOM" train "${BASE[@]}" --set log.dir="$WORK/cool" --set train.steps=11 --set optim.lr_decay=wsd \
  --set optim.wsd_decay_steps=3 --set checkpoint.resume="$WORK/ck/step_00000008" --set checkpoint.dir="$WORK/cool_ck" \
  > "$WORK/cool.out" 2>&1 || { rc=$?; cat "$WORK/cool.out"; fail "the WSD cooldown branch: exit status $rc"; }
grep -qF "loom: resuming: the learning rate at step 9 is 0.001, as the checkpoint's schedule had it" "$WORK/cool.out" ||
  { grep resuming "$WORK/cool.out"; fail "the cooldown branch does not say its learning rate"; }
diff "$WORK/ck_before" <(ls "$WORK/ck") || fail "the cooldown branch changed the long run's checkpoint.dir"
[ -d "$WORK/cool_ck/step_00000011" ] || fail "the cooldown branch saved no step_00000011"
python3 - "$WORK" <<'PY'
import json, math, sys
w = sys.argv[1]
lr, mn, W = 1e-3, 3e-4, 3

def expected(i, kind, D, C=None, shape="linear", mn=mn):
    """The rate at 0-based step i: warmup (i+1)/W, then decay to mn at D, mn after."""
    if i < W:
        return lr * (i + 1) / W
    if kind == "constant":
        return lr
    if kind == "inverse_sqrt":  # Megatron's: lr sqrt(warmup / step), not below min_lr, min_lr after D
        return mn if i > D else max(mn, lr * math.sqrt(W / i))
    if i >= D:
        return mn
    if kind == "wsd":
        C = min(C, D - W)
        start = D - C  # the last step at lr
        if i <= start:
            return lr
        f = (i - start) / C
        keep = {"linear": 1 - f, "cosine": 0.5 * (1 + math.cos(math.pi * f)), "sqrt": 1 - math.sqrt(f),
                "exponential": 2 * 0.5 ** f - 1}[shape]
    else:
        f = (i - W) / (D - W)
        keep = 0.5 * (1 + math.cos(math.pi * f)) if kind == "cosine" else 1 - f
    return mn + (lr - mn) * keep

def check(name, n, *schedule, **kw):
    rows = [json.loads(l) for l in open(f"{w}/{name}/metrics.jsonl")]
    steps = [r["step"] for r in rows]
    assert steps == list(range(n)), (name, steps)
    for r in rows:
        want = expected(r["step"], *schedule, **kw)
        assert abs(r["lr"] - want) <= 1e-8 * want, (name, r["step"], r["lr"], want)
    print(name, " ".join(f"{r['lr']:.3g}" for r in rows))

check("cosine", 14, "cosine", 10)
check("linear", 14, "linear", 14)
check("wsd_linear", 14, "wsd", 14, 5)
check("wsd_cosine", 14, "wsd", 14, 5, shape="cosine")
check("wsd_sqrt", 14, "wsd", 14, 2, shape="sqrt")
check("wsd_exp", 14, "wsd", 14, 6, shape="exponential")
check("constant", 14, "constant", 14)
check("inv_sqrt", 14, "inverse_sqrt", 14, mn=5e-4)
rows = [json.loads(l) for l in open(f"{w}/inv_sqrt/metrics.jsonl")]
assert rows[11]["lr"] > 5e-4 and rows[12]["lr"] == rows[13]["lr"] == 5e-4, "inverse_sqrt: not at its floor from step 12"
# Steps 1-8 on the 20-step schedule, 9-30 on the 30-step one: the same rate across the resume.
rows = [json.loads(l) for l in open(f"{w}/wsd_a/metrics.jsonl")]
assert [r["step"] for r in rows] == list(range(30)), [r["step"] for r in rows]
for r in rows:
    i = r["step"]
    want = expected(i, "wsd", 20 if i < 8 else 30, 2)
    assert abs(r["lr"] - want) <= 1e-8 * want, ("wsd resume", r["step"], r["lr"], want)
assert rows[28]["lr"] == lr and rows[29]["lr"] < lr, "the cooldown did not move to the new end"
print("wsd resumed", " ".join(f"{r['lr']:.3g}" for r in rows))
rows = [json.loads(l) for l in open(f"{w}/cool/metrics.jsonl")]
assert [r["step"] for r in rows] == [8, 9, 10], [r["step"] for r in rows]
for r in rows:
    want = expected(r["step"], "wsd", 11, 3)
    assert abs(r["lr"] - want) <= 1e-8 * want, ("cooldown branch", r["step"], r["lr"], want)
assert rows[0]["lr"] == lr and rows[2]["lr"] < rows[1]["lr"] < lr, "the branch did not cool down"
print("cooldown branch", " ".join(f"{r['lr']:.3g}" for r in rows))
PY
echo "PASS"
