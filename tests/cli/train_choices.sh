# log.choices: multiple-choice items scored during training at every log.eval_every, as llm.c
# reports HellaSwag. Items made from the fortunes text (a fortune's start, its own continuation
# and three others') in HellaSwag's JSON lines, tokenized with data.train's byte tokenizer. The
# accuracies at each evaluation are the same in one rank, tp 2 x pp 2, dp 2 under ZeRO-3 and
# pp 2 x dp 2 (the items dealt over dp, 30 and 29 of them, so one rank pads its forwards to the
# other's count; the stages passing activations); `loom eval --choices` on the run's
# last checkpoint gives the last step's figures; the recipe's contradictions are refused.
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
/usr/bin/python3 - "$WORK" <<'PY'
import json, random, sys
rng = random.Random(7)
text = open("/usr/share/games/fortunes/fortunes", encoding="utf-8", errors="replace").read()
docs = [d.strip() for d in text.split("\n%\n") if 40 <= len(d.strip()) <= 400 and d.isascii()]
rng.shuffle(docs)
lines = []
for i in range(59):  # odd: dp 2 gets 30 and 29 items, so one rank runs padding forwards
    d = docs[i]
    cut = rng.randint(12, 20)
    ctx, right = d[:cut], d[cut:cut + 12]
    others = [docs[59 + 3 * i + k][cut:cut + 12] for k in range(3)]
    label = rng.randrange(4)
    endings = others[:label] + [right] + others[label:]
    lines.append(json.dumps({"ctx": ctx, "endings": endings, "label": label}))
open(f"{sys.argv[1]}/items.jsonl", "w").write("\n".join(lines) + "\n")
PY
BASE=(configs/tiny.yaml "${SMALL[@]}" --set train.global_batch=8 --set train.micro_batch=2 --set train.steps=6
      --set log.every=3 --set log.eval_every=3 --set log.tensorboard=false --set data.val=""
      --set log.choices="$WORK/items.jsonl")
run() {  # name ranks args...
  local name=$1 np=$2
  shift 2
  OMP_NUM_THREADS=1 mpi -np "$np" "$LOOM" train "${BASE[@]}" --set log.dir="$WORK/$name" "$@" > "$WORK/$name.out" 2>&1 ||
    { rc=$?; cat "$WORK/$name.out"; fail "$name: exit status $rc"; }
}
run one 1 --set checkpoint.dir="$WORK/ck"
grep -qF "loom: log.choices: 59 multiple-choice items from $WORK/items.jsonl (236 forward rows of 32 tokens), scored every 3 steps and at the end" "$WORK/one.out" ||
  { grep -n "choices" "$WORK/one.out"; fail "the header does not describe log.choices"; }
grep -qE "^step +6/6 .*\| acc_norm [0-9.]+ \|" "$WORK/one.out" || { tail -3 "$WORK/one.out"; fail "no acc_norm on the progress line"; }
grep -qE "^loom: trained 6 steps .*, log.choices acc_norm [0-9.]+," "$WORK/one.out" || { tail -2 "$WORK/one.out"; fail "the summary has no acc_norm"; }
run tp2pp2 4 --set parallel.tp=2 --set parallel.pp=2
run zero3 2 --set parallel.zero=3
run pp2dp2 4 --set parallel.pp=2
"$LOOM" eval "$WORK/ck" --choices "$WORK/items.jsonl" > "$WORK/eval.out" || fail "loom eval --choices on the checkpoint: exit $?"
/usr/bin/python3 - "$WORK" <<'PY'
import json, re, sys
w = sys.argv[1]
def evals(name):
    rows = [json.loads(l) for l in open(f"{w}/{name}/metrics.jsonl")]
    return [(r["step"], r["choice_acc"], r["choice_acc_norm"]) for r in rows if "choice_acc" in r]
one = evals("one")
assert [s for s, _, _ in one] == [2, 5], one
for name in ("tp2pp2", "zero3", "pp2dp2"):
    assert evals(name) == one, (name, evals(name), one)
line = open(f"{w}/eval.out").read()
m = re.search(r"acc ([0-9.]+) .*acc_norm ([0-9.]+)", line)
assert m and abs(float(m[1]) - one[-1][1]) < 5e-5 and abs(float(m[2]) - one[-1][2]) < 5e-5, (line, one)
print("choice_acc, choice_acc_norm at steps 3 and 6:", one, "; the same in tp 2 x pp 2, zero 3, pp 2 x dp 2 and loom eval")
PY
# scripts/plot_metrics.py adds an acc_norm panel for runs that scored log.choices.
/usr/bin/python3 scripts/plot_metrics.py "$WORK/one" "$WORK/zero3" -o "$WORK/runs.png" > /dev/null || fail "plot_metrics.py failed"
[ "$(head -c 8 "$WORK/runs.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "plot_metrics.py wrote no PNG"
refused() {  # expected-message args...
  local want=$1
  shift
  set +e
  mpi -np 1 "$LOOM" train configs/tiny.yaml "${SMALL[@]}" --set log.dir="$WORK/refused" "$@" > "$WORK/refused.out" 2>&1
  local rc=$?
  set -e
  [ "$rc" = 2 ] || { cat "$WORK/refused.out"; fail "$*: exit $rc, expected 2"; }
  grep -qF -- "$want" "$WORK/refused.out" || { cat "$WORK/refused.out"; fail "$*: no '$want'"; }
}
refused "is scored at every evaluation: set log.eval_every" --set log.choices="$WORK/items.jsonl" --set log.eval_every=0
refused "records no tokenizer (it is no loom prep directory)" --set log.choices="$WORK/items.jsonl" \
  --set log.eval_every=2 --set "data.train=data/fortunes/train_*.bin" --set data.val=""
echo PASS
