# A weighted blend for data.train ("0.8 data/fortunes 0.2 gpl", Megatron's --data-path form: two
# loom prep directories of byte tokens): the header says each part's share and passes; one rank
# and dp 2 train on the same global batches (the same losses); a resume goes on exactly, and one
# under other weights is refused (the order would change) unless checkpoint.allow_changes; a
# validation blend's repeat note offers the most log.eval_batches that repeat nothing.
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
# The second corpus: the GPL's text (base-files: on every Debian system), byte tokens as the
# fortunes' (the same vocabulary: a raw text file reads as 256 ids, refused beside 257).
"$LOOM" prep --tokenizer byte --out "$WORK/gpl" /usr/share/common-licenses/GPL-3 > /dev/null
TEXT=$WORK/gpl
BLEND="0.8 data/fortunes 0.2 $TEXT"
BASE=(configs/tiny.yaml "${SMALL[@]}" --set train.global_batch=16 --set train.micro_batch=4 --set train.steps=12
      --set log.every=1 --set log.eval_every=6 --set log.tensorboard=false)
mpi -np 1 "$LOOM" train "${BASE[@]}" --set "data.train=$BLEND" --set log.dir="$WORK/one" > "$WORK/one.out" 2>&1 || { rc=$?; cat "$WORK/one.out"; fail "one rank on the blend: exit status $rc"; }
grep -E "^loom: data.train blend of 2: 80% data/fortunes \([0-9]+ samples, [0-9.e+-]+ passes in train.steps\), 20% $TEXT \([0-9]+ samples" "$WORK/one.out" ||
  { grep -n "blend\|samples" "$WORK/one.out"; fail "the header does not describe the blend"; }
mpi -np 2 "$LOOM" train "${BASE[@]}" --set "data.train=$BLEND" --set log.dir="$WORK/two" > "$WORK/two.out" 2>&1 || { rc=$?; cat "$WORK/two.out"; fail "dp 2 on the blend: exit status $rc"; }
# Stopped at 6 and resumed: the same steps as the straight run.
mpi -np 2 "$LOOM" train "${BASE[@]}" --set "data.train=$BLEND" --set log.dir="$WORK/split" --set checkpoint.dir="$WORK/ck" \
  --set train.stop_at_step=6 > "$WORK/split1.out" 2>&1 || { rc=$?; cat "$WORK/split1.out"; fail "the first half: exit status $rc"; }
mpi -np 2 "$LOOM" train "${BASE[@]}" --set "data.train=$BLEND" --set log.dir="$WORK/split" --set checkpoint.dir="$WORK/ck" \
  > "$WORK/split2.out" 2>&1 || { rc=$?; cat "$WORK/split2.out"; fail "the resumed half: exit status $rc"; }
# Other weights reorder the stream: refused, naming both, then allowed.
set +e
mpi -np 2 "$LOOM" train "${BASE[@]}" --set "data.train=0.5 data/fortunes 0.5 $TEXT" --set log.dir="$WORK/split" \
  --set checkpoint.dir="$WORK/ck" --set train.steps=14 > "$WORK/reweigh.out" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || { cat "$WORK/reweigh.out"; fail "a resume under other blend weights: exit $rc, expected 2"; }
grep -qE "the data.train blend changed from 80% of [0-9]+ \+ 20% of [0-9]+ samples to 50% of [0-9]+ \+ 50% of [0-9]+ samples" "$WORK/reweigh.out" ||
  { cat "$WORK/reweigh.out"; fail "the refusal does not name the blend's change"; }
mpi -np 2 "$LOOM" train "${BASE[@]}" --set "data.train=0.5 data/fortunes 0.5 $TEXT" --set log.dir="$WORK/split" \
  --set checkpoint.dir="$WORK/ck" --set train.steps=14 --set checkpoint.allow_changes=true > "$WORK/reweigh2.out" 2>&1 || { rc=$?; cat "$WORK/reweigh2.out"; fail "the allowed reweighted resume: exit status $rc"; }
grep -qE "the data.train blend changed from 80% of .* samples to 50% of .* samples \(checkpoint.allow_changes=true\)" "$WORK/reweigh2.out" ||
  { grep resuming "$WORK/reweigh2.out"; fail "the allowed change is not said"; }
# A raw text file (256 byte ids) beside the byte tokenizer's 257: two tokenizers, refused.
set +e
mpi -np 1 "$LOOM" train "${BASE[@]}" --set "data.train=0.8 data/fortunes 0.2 /usr/share/common-licenses/GPL-3" \
  --set log.dir="$WORK/mixed" > "$WORK/mixed.out" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || { cat "$WORK/mixed.out"; fail "a blend of two vocabularies: exit $rc, expected 2"; }
grep -q "mixes tokenizers: data/fortunes/manifest.json declares vocab size 257, /usr/share/common-licenses/GPL-3 256" "$WORK/mixed.out" ||
  { cat "$WORK/mixed.out"; fail "a blend of two vocabularies is not named"; }
# A validation blend whose small part (the GPL, 80% of the weight) repeats long before the whole:
# the note's suggested log.eval_batches is the most without any repeat, so it gives no note and
# one batch more does.
VAL_BLEND="0.2 data/fortunes 0.8 $TEXT/train_000000.bin"
evalrun() {  # name eval_batches
  mpi -np 1 "$LOOM" train "${BASE[@]}" --set "data.val=$VAL_BLEND" --set train.steps=1 --set log.eval_every=1 \
    --set log.eval_batches="$2" --set log.dir="$WORK/$1" > "$WORK/$1.out" 2>&1 || { rc=$?; cat "$WORK/$1.out"; fail "$1: exit status $rc"; }
}
evalrun valrep 100
note=$(grep "loom: note: log.eval_batches=100" "$WORK/valrep.out") || { cat "$WORK/valrep.out"; fail "no note on the validation blend's repeats"; }
echo "$note" | grep -qE "data.val is a blend whose parts give [0-9]+ distinct ones among them, so some repeat" ||
  fail "the note does not say the blend repeats: $note"
most=$(echo "$note" | sed -nE 's/.*set log.eval_batches to at most ([0-9]+)$/\1/p')
[ -n "$most" ] && [ "$most" -gt 0 ] || fail "the note suggests no log.eval_batches: $note"
evalrun valfit "$most"
if grep -q "validation sequences" "$WORK/valfit.out"; then fail "log.eval_batches=$most, as suggested, still repeats: $(grep note "$WORK/valfit.out")"; fi
evalrun valover $((most + 1))
grep -q "loom: note: log.eval_batches=$((most + 1)) asks for" "$WORK/valover.out" ||
  fail "log.eval_batches=$((most + 1)), one past the suggestion, is not said to repeat"
echo "validation blend: at most $most global batches without a repeat"
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
rows = lambda d: [json.loads(l) for l in open(f"{w}/{d}/metrics.jsonl")]
one, two, split = rows("one"), rows("two"), rows("split")
assert [r["step"] for r in one] == list(range(12)), [r["step"] for r in one]
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(one, two))
print(f"one rank vs dp 2 on the blend: worst relative loss difference {worst:.1e}")
assert worst <= 1e-5, worst
assert len([r for r in one if "val_loss" in r]) == 2, "no validation"
for a, b in zip(two, split[:12]):
    assert (a["loss"], a["grad_norm"]) == (b["loss"], b["grad_norm"]), ("the resumed run differs", a, b)
assert [r["step"] for r in split] == list(range(14)), [r["step"] for r in split]
print("stop at 6 + resume: identical; reweighted resume to step 14 trained")
PY
echo PASS
