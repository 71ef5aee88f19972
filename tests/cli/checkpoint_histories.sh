# Going back to an older checkpoint starts a new history in the same checkpoint.dir. The old
# history's checkpoints above the step gone back to are set aside at the new history's first
# save (kept as step_N.replaced-<time>), so that neither retention nor the automatic fallback
# past a damaged checkpoint can mix the two histories, even once the new one's steps pass the
# old one's. (Before, the old history's step 10 counted in the new one's keep_last, pruning the
# very step 4 gone back to, and was itself deleted later without a word; and a damaged newest
# checkpoint fell back to the old history's step 10 instead of the new one's step 8.)
#   checkpoint_histories.sh LOOM SRC
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=2
ck=$WORK/ck
t() {
  "$LOOM" train configs/tiny.yaml "${SMALL[@]}" --set data.val= --set log.eval_every=0 --set log.every=100 \
    --set train.steps=40 --set checkpoint.dir="$ck" --set checkpoint.every=4 --set checkpoint.keep_last=3 \
    --set log.dir="$WORK/run" "$@"
}
steps() { ls "$ck" | grep '^step_[0-9]*$' | tr '\n' ' '; }
aside() { ls "$ck" | grep -c '\.replaced-' || true; }

t --set train.stop_at_step=10 > "$WORK/a.out" 2>&1 || { cat "$WORK/a.out"; fail "the first run failed"; }
[ "$(steps)" = "step_00000004 step_00000008 step_00000010 " ] || fail "first run: $(steps)"
old10=$(sha256sum "$ck/step_00000010/model.h5" | cut -d' ' -f1)

# [1] Back to step 4 with another learning rate, to step 11: step 8 is saved again (the old one
# set aside), the old step 10 is set aside too, and step 4 stays (4, 8, 11: keep_last 3).
t --set checkpoint.resume="$ck/step_00000004" --set optim.lr=5e-4 --set train.stop_at_step=11 > "$WORK/b.out" 2>&1 ||
  { cat "$WORK/b.out"; fail "[1] the run gone back to step 4 failed"; }
grep -q "step 8 was saved before by an earlier history of this run; that checkpoint is kept as" "$WORK/b.out" ||
  { cat "$WORK/b.out"; fail "[1] the old step 8 was not said to be set aside"; }
grep -q "step_00000010 is numbered above step 4, where this run continues .*: kept as .*step_00000010\.replaced-" \
  "$WORK/b.out" || { cat "$WORK/b.out"; fail "[1] the old step 10 was not said to be set aside"; }
[ "$(steps)" = "step_00000004 step_00000008 step_00000011 " ] || fail "[1] expected 4 8 11, found $(steps)"
[ "$(aside)" = 2 ] || fail "[1] expected the old 8 and 10 set aside: $(ls "$ck")"
echo "[1] $(steps)+ $(aside) set aside"

# [2] The newest (11) damaged: the automatic resume falls back to this history's step 8, not to
# the old history's step 10; its first save sets the damaged 11 aside as well.
python3 - "$ck/step_00000011/model.h5" <<'PY'
import os, sys
p = sys.argv[1]; n = os.path.getsize(p)
with open(p, 'r+b') as f:
    f.seek(n * 2 // 3); b = f.read(8); f.seek(n * 2 // 3); f.write(bytes(x ^ 0xff for x in b))
PY
t --set optim.lr=5e-4 --set train.stop_at_step=20 > "$WORK/c.out" 2>&1 || { cat "$WORK/c.out"; fail "[2] the resume failed"; }
grep -q "checkpoint .*step_00000011 is damaged" "$WORK/c.out" || { cat "$WORK/c.out"; fail "[2] the damage was not seen"; }
grep -q "^loom: resumed from .*/step_00000008 " "$WORK/c.out" ||
  { cat "$WORK/c.out"; fail "[2] did not fall back to this history's step 8: $(grep 'resumed from' "$WORK/c.out")"; }
grep -q "the checkpoint's run had" "$WORK/c.out" && { cat "$WORK/c.out"; fail "[2] resumed a checkpoint of the other learning rate"; }
# [3] Retention counts this history only, and names what it deletes; nothing set aside is lost.
[ "$(steps)" = "step_00000012 step_00000016 step_00000020 " ] || fail "[3] expected 12 16 20, found $(steps)"
grep -q "pruned step_00000004" "$WORK/c.out" || { cat "$WORK/c.out"; fail "[3] the pruned step 4 was not named"; }
[ "$(aside)" = 3 ] || fail "[3] expected the old 8 and 10 and the damaged 11 kept: $(ls "$ck")"
[ "$(sha256sum "$ck"/step_00000010.replaced-*/model.h5 | cut -d' ' -f1)" = "$old10" ] || fail "[3] the old step 10 changed"
echo "[3] $(steps)+ $(aside) set aside"

# [4] An explicit resume from outside the current history (here the set-aside old step 10):
# every checkpoint of the history this directory held is set aside at the first save, those
# below the step resumed from too (before, 12 and 16 would have counted in the new history's
# keep_last and been pruned), and nothing is deleted.
all_before=$(ls "$ck" | grep -c '^step_')
old10_dir=$(ls -d "$ck"/step_00000010.replaced-*)
t --set checkpoint.resume="$old10_dir" --set train.stop_at_step=14 > "$WORK/d.out" 2>&1 ||
  { cat "$WORK/d.out"; fail "[4] the resume of the set-aside step 10 failed"; }
grep -q "step_00000016 belongs to the history this directory held before this run resumed from a checkpoint outside it" \
  "$WORK/d.out" || { cat "$WORK/d.out"; fail "[4] step 16 of the directory's history was not set aside"; }
[ "$(steps)" = "step_00000012 step_00000014 " ] || fail "[4] expected 12 14, found $(steps)"
[ "$(aside)" = 6 ] || fail "[4] expected the old 12, 16 and 20 set aside too: $(ls "$ck")"
[ "$(ls "$ck" | grep -c '^step_')" = $((all_before + 2)) ] || fail "[4] a checkpoint was deleted: $(ls "$ck")"
echo "[4] $(steps)+ $(aside) set aside"
echo PASS
