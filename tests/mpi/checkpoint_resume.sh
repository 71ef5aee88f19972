# Resume is exact: 40 steps straight, and 20 steps + stop + resume + 20 more, give bitwise the
# same logged losses and the same final parameters and Adam moments (per-tensor CRCs of the final
# checkpoints), for one rank, for tp 2 x dp 2 with ZeRO-1, and for dp 2 with asynchronous saves. The resumed run continues the
# same metrics.jsonl with no duplicated or missing step. The files open in h5dump.
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
common=("${SMALL[@]}" --set train.steps=40 --set log.every=1 --set log.eval_every=0 --set checkpoint.every=10 --set checkpoint.keep_last=2)
for layout in "1:" "4:--set parallel.tp=2 --set parallel.zero=1" "2:--set checkpoint.async=true"; do
  IFS=: read -r np extra <<<"$layout"
  [ -z "${extra##*async*}" ] && [ -n "$extra" ] && np_tag="${np}async" || np_tag=$np
  # shellcheck disable=SC2086
  mpi -np "$np" "$LOOM" train configs/tiny.yaml "${common[@]}" $extra --set checkpoint.dir="$WORK/a$np_tag" \
    --set log.dir="$WORK/ra$np_tag" > /dev/null
  # shellcheck disable=SC2086
  mpi -np "$np" "$LOOM" train configs/tiny.yaml "${common[@]}" $extra --set checkpoint.dir="$WORK/b$np_tag" \
    --set log.dir="$WORK/rb$np_tag" --set train.stop_at_step=20 > /dev/null
  # shellcheck disable=SC2086
  mpi -np "$np" "$LOOM" train configs/tiny.yaml "${common[@]}" $extra --set checkpoint.dir="$WORK/b$np_tag" \
    --set log.dir="$WORK/rb$np_tag" > "$WORK/resume$np_tag.out"
  np=$np_tag
  grep -q "resumed from .*step_00000020" "$WORK/resume$np.out" || fail "np $np: did not resume from step 20"
  strip() { sed -E 's/, "tokens_per_s".*//' "$1"; }
  diff <(strip "$WORK/ra$np/metrics.jsonl") <(strip "$WORK/rb$np/metrics.jsonl") || fail "np $np: metrics differ"
  [ "$(wc -l < "$WORK/rb$np/metrics.jsonl")" = 40 ] || fail "np $np: the resumed run's metrics do not hold 40 steps"
  tensors() { "$LOOM" ckpt inspect "$1" | sed -n '/tensors/,/recipe:/p'; }
  diff <(tensors "$WORK/a$np") <(tensors "$WORK/b$np") || fail "np $np: final parameters differ"
  [ "$(ls "$WORK/b$np" | grep -c '^step_')" = 2 ] || fail "np $np: keep_last=2 not honoured: $(ls "$WORK/b$np")"
  echo "np $np: 20 + 20 steps == 40 steps, bitwise (losses, parameters, Adam moments)"
done
h5dump -H "$WORK/a1/step_00000040/model.h5" > "$WORK/h5dump.txt" || fail "h5dump cannot read the checkpoint"
grep -q 'DATASET "wte"' "$WORK/h5dump.txt" || fail "h5dump shows no wte dataset"
echo PASS
