# Never lose a user's work, end to end on one rank of the tiny model (issue cases in brackets):
#  [1]  a run that diverges keeps the last clean checkpoint however many saves follow, says so,
#       and a resume of a diverged state names where it came from and the clean one;
#  [2]  a copied folder (step_10_backup) is neither resumed from nor pruned;
#  [12] a checkpoint whose manifest was deleted is reported, not silently skipped;
#  [19] checkpoint.resume= a missing path, or a checkpoint.dir, says so;
#  [17] a checkpoint.dir no rank can write is refused before training (status 2);
#  [14] a full disk during a save: one line with "No space left on device" and the path, no
#       HDF5 diagnostics, the .partial removed, the previous checkpoint intact and resumable;
#  [11] resuming with another seed, or with the training data's tokens edited in place, is
#       refused unless checkpoint.allow_changes; another global batch continues at the exact
#       sample, and says so;
#  [15] exit 75 only with a checkpoint saved, 4 when a stop saved nothing;
#  [19] the end-of-run summary speaks of this session; nothing to train is said as such;
#  [8]  a model that cannot fit is refused before allocating, with the plan's figures; one whose
#       allocation fails anyway says what was being allocated.
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=2
quiet=(--set log.every=100 --set log.eval_every=0)
t() { "$LOOM" train configs/tiny.yaml "${quiet[@]}" "$@"; }
# Runs, keeping status, stdout and stderr: r NAME ARGS...
r() { local name=$1; shift; set +e; t "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"; echo $? > "$WORK/$name.rc"; set -e; }
rc() { cat "$WORK/$1.rc"; }
expect_rc() { [ "$(rc "$1")" = "$2" ] || { cat "$WORK/$1.out" "$WORK/$1.err"; fail "$1: exit status $(rc "$1"), expected $2"; }; }
has() { grep -q -- "$2" "$WORK/$1.out" "$WORK/$1.err" || { cat "$WORK/$1.out" "$WORK/$1.err"; fail "$1: no line matching: $2"; }; }

# [1] Ten clean steps (checkpoints 6, 8, 10), then a learning rate of 1e6 from step 10: the run
# diverges and stops after 3 non-finite steps; twice more with the normal rate it resumes the
# diverged state and diverges again. keep_last = 3 would have deleted step 10.
ck=$WORK/ck
r clean --set train.steps=10 --set checkpoint.every=2 --set checkpoint.dir="$ck" --set log.dir="$WORK/l1"
expect_rc clean 0
r diverge --set train.steps=30 --set checkpoint.every=100 --set optim.lr=1e6 --set optim.min_lr=0 \
  --set checkpoint.dir="$ck" --set log.dir="$WORK/l2"
expect_rc diverge 1
has diverge "the last clean checkpoint is .*step_00000010"
for i in 1 2; do
  r again$i --set train.steps=30 --set checkpoint.dir="$ck" --set log.dir="$WORK/l3$i"
  expect_rc again$i 1
  has again$i "was saved after the run went non-finite or diverged (first at step 1[0-9]); the last clean checkpoint before that is .*step_00000010"
  has again$i "this session resumed from .*step_000000[0-9]*"
done
has again2 "keeping .*step_00000010 beyond checkpoint.keep_last = 3: it is the last clean checkpoint"
[ -f "$ck/step_00000010/manifest.json" ] || fail "[1] the last clean checkpoint was pruned: $(ls "$ck")"
[ "$(ls "$ck" | grep -c '^step_[0-9]*$')" = 4 ] || fail "[1] expected keep_last 3 + the pinned one: $(ls "$ck")"
python3 -c "
import json,sys
m = json.load(open('$ck/step_00000010/manifest.json'))['health']
assert m['clean'] and m['first_bad_step'] is None and m['params_finite'], m
" || fail "[1] step 10's manifest does not record a clean state"
# Back to the clean one explicitly, up to the first step the diverged history saved after it:
# the new checkpoints are clean again; that step's old checkpoint is set aside (not deleted, and
# said so), and so is every other one of the diverged history above step 10.
redo=$(ls "$ck" | sed -n 's/^step_0*\([0-9][0-9]*\)$/\1/p' | awk '$1 > 10' | sort -n | head -1)
[ -n "$redo" ] || fail "[1] the diverged history saved nothing after step 10: $(ls "$ck")"
above=$(ls "$ck" | sed -n 's/^step_0*\([0-9][0-9]*\)$/\1/p' | awk '$1 > 10' | wc -l)
r back --set train.steps="$redo" --set checkpoint.resume="$ck/step_00000010" --set checkpoint.dir="$ck" \
  --set log.dir="$WORK/l4"
expect_rc back 0
has back "resumed from .*step_00000010"
redo_dir=$(printf 'step_%08d' "$redo")
grep -q '"clean": true' "$ck/$redo_dir/manifest.json" || fail "[1] the new history is not clean"
has back "step $redo was saved before by an earlier history of this run; that checkpoint is kept as .*\.replaced-"
[ "$(ls "$ck" | grep -c '\.replaced-')" = "$above" ] || fail "[1] expected the $above diverged checkpoints set aside: $(ls "$ck")"
[ -z "$(ls "$ck" | sed -n 's/^step_0*\([0-9][0-9]*\)$/\1/p' | awk -v r="$redo" '$1 > r')" ] ||
  fail "[1] diverged checkpoints above step $redo were left in the history: $(ls "$ck")"
# And auto-resume now follows `latest`, naming the set-aside ones, never resuming them.
r follow --set train.steps=$((redo + 2)) --set checkpoint.dir="$ck" --set log.dir="$WORK/l5"
expect_rc follow 0
has follow "resumed from .*$redo_dir"
has follow "another history's checkpoint, set aside when this run went back to an earlier step"
# Two ranks: the non-finite stop is raised on both at once; rank 0's message (with the last
# clean checkpoint) and run.json's record both get out before the job ends. (One thread a rank:
# 2 ranks of 2 spinning OpenMP threads on 2 cores took 17 s here, against 2.5 s.)
set +e
OMP_NUM_THREADS=1 mpi -np 2 "$LOOM" train configs/tiny.yaml "${quiet[@]}" --set train.steps=40 --set optim.lr=1e6 --set optim.min_lr=0 \
  --set checkpoint.dir="$ck" --set log.dir="$WORK/l5b" > "$WORK/two.out" 2> "$WORK/two.err"; echo $? > "$WORK/two.rc"
set -e
expect_rc two 1
has two "^loom: error: 3 steps in a row .*the last clean checkpoint is .*step_000000"
python3 -c "
import json; s = json.load(open('$WORK/l5b/run.json'))['sessions'][-1]
assert s['exit_status'] == 1 and 'non-finite' in s['error'], s" || fail "[1] two ranks: run.json lacks the failure"
echo "[1] divergence: $(grep -h "keeping" "$WORK/again2.out" | head -1)"

# [2] and [12]: a copy under another name, and the newest checkpoint's manifest deleted.
ck2=$WORK/ck2
r base --set train.steps=6 --set checkpoint.every=2 --set checkpoint.keep_last=2 --set checkpoint.dir="$ck2" \
  --set log.dir="$WORK/l6"
cp -r "$ck2/step_00000004" "$ck2/step_4_backup"
cp -r "$ck2/step_00000006" "$ck2/step_99999999"          # Loom's name, but the manifest says 6
r stray --set train.steps=10 --set checkpoint.every=2 --set checkpoint.keep_last=2 --set checkpoint.dir="$ck2" \
  --set log.dir="$WORK/l7"
expect_rc stray 0
has stray "resumed from .*step_00000006 "
has stray "step_4_backup: not a name Loom writes"
has stray "step_99999999: its manifest records step 6"
[ -d "$ck2/step_4_backup" ] && [ -d "$ck2/step_99999999" ] || fail "[2] a user's folder was deleted"
[ -d "$ck2/step_00000010" ] && [ -d "$ck2/step_00000008" ] || fail "[2] the real checkpoints were pruned: $(ls "$ck2")"
rm "$ck2/step_00000010/manifest.json"
mkdir -p "$ck2/step_00000012.partial" && echo x > "$ck2/step_00000012.partial/model.h5"  # an interrupted save
mkdir -p "$ck2/step_00000014.partial" && echo mine > "$ck2/step_00000014.partial/notes.txt"  # not a save's file
r nomanifest --set train.steps=11 --set checkpoint.dir="$ck2" --set log.dir="$WORK/l8"
expect_rc nomanifest 0
has nomanifest "step_00000010: no manifest.json (an incomplete or damaged checkpoint): not used, not deleted"
has nomanifest "resumed from .*step_00000008"
[ -d "$ck2/step_00000010" ] || fail "[12] the manifest-less checkpoint was deleted"
has nomanifest "removing .*step_00000012.partial: an interrupted save"
[ ! -e "$ck2/step_00000012.partial" ] || fail "[12] the interrupted save's leftovers were kept"
has nomanifest "step_00000014.partial looks like an interrupted save but holds notes.txt, which a save does not write: left"
[ "$(cat "$ck2/step_00000014.partial/notes.txt")" = mine ] || fail "[12] a user's file in a .partial was deleted"
# ... and a save of that very step sets it aside rather than clearing it.
r partial14 --set train.steps=14 --set checkpoint.every=14 --set checkpoint.dir="$ck2" --set log.dir="$WORK/l8p"
expect_rc partial14 0
has partial14 "step_00000014.partial holds notes.txt, which a save does not write: moved to .*step_00000014.partial.kept-"
[ "$(cat "$ck2"/step_00000014.partial.kept-*/notes.txt)" = mine ] || fail "[12] the save of step 14 lost the user's file"
[ -f "$ck2/step_00000014/manifest.json" ] || fail "[12] step 14 was not saved"
rm -rf "$ck2"/step_00000014*
# A directory named `latest` (every save writes that file): refused before training, not at the first save.
mkdir "$WORK/cklatest" && mkdir "$WORK/cklatest/latest"
r latestdir --set train.steps=4 --set checkpoint.every=2 --set checkpoint.dir="$WORK/cklatest" --set log.dir="$WORK/l8l"
expect_rc latestdir 2
has latestdir "cklatest/latest is not a regular file; Loom writes the name of the newest checkpoint there"
[ -d "$WORK/cklatest/latest" ] || fail "[12] the user's latest/ was touched"
# A user's folder named as the step a save writes: set aside and said so, not as an earlier history.
mkdir -p "$WORK/ckuser/step_00000004" && echo mine > "$WORK/ckuser/step_00000004/notes.txt"
r userstep --set train.steps=4 --set checkpoint.every=4 --set checkpoint.dir="$WORK/ckuser" --set log.dir="$WORK/l8u"
expect_rc userstep 0
has userstep "step_00000004 was in the way of this save and is not a complete checkpoint (no manifest.json); it is kept"
[ "$(cat "$WORK"/ckuser/step_00000004.replaced-*/notes.txt)" = mine ] || fail "[12] the user's step_00000004 was lost"
# A fresh run (checkpoint.resume=never) into a directory of checkpoints would prune them: refused.
r fresh --set train.steps=2 --set checkpoint.resume=never --set checkpoint.dir="$ck2" --set log.dir="$WORK/l8b"
expect_rc fresh 2
has fresh "holds checkpoints of an earlier run .* and checkpoint.resume=never"
echo "[2][12] strays: $(grep -c "warning" "$WORK/nomanifest.err") warnings, nothing of the user's deleted"

# [19] checkpoint.resume= a missing path, or a checkpoint.dir instead of a checkpoint.
r missing --set checkpoint.resume="$WORK/nowhere" --set log.dir="$WORK/l9"
expect_rc missing 2
has missing "checkpoint.resume=$WORK/nowhere: .*nowhere: no such directory"
r isdir --set checkpoint.resume="$ck2" --set log.dir="$WORK/l10"
expect_rc isdir 2
has isdir "is a checkpoint.dir, not a checkpoint"

# [17] checkpoint.dir on a read-only filesystem: refused before the first step.
if mkdir -p "$WORK/ro" && mount -t tmpfs -o size=1m,ro tmpfs "$WORK/ro" 2>/dev/null; then
  r readonly --set train.steps=50 --set checkpoint.dir="$WORK/ro/ck" --set log.dir="$WORK/l11"
  umount "$WORK/ro"
  expect_rc readonly 2
  has readonly "checkpoint.dir"
  grep -q "^step " "$WORK/readonly.out" && fail "[17] it trained before finding checkpoint.dir unwritable"
  echo "[17] read-only checkpoint.dir: $(head -1 "$WORK/readonly.err")"
else
  echo "[17] skipped: cannot mount a tmpfs here (not root?)"
fi

# [14] A full disk. The tiny model's checkpoint is 10.1 MB. (a) 16 MB: the first save fits, the
# second is refused by the free-space check before anything is written. (b) 32 MB holding one
# checkpoint and a filler file that leaves free just above the datasets' bytes: the check passes and the write itself hits ENOSPC (HDF5
# aligns large datasets to 1 MiB, so the file is bigger than its data).
if mkdir -p "$WORK/full" && mount -t tmpfs -o size=16m tmpfs "$WORK/full" 2>/dev/null; then
  trap 'umount "$WORK/full" 2>/dev/null || true; rm -rf "$WORK"' EXIT
  r full --set train.steps=4 --set checkpoint.every=2 --set checkpoint.dir="$WORK/full/ck" --set log.dir="$WORK/l12"
  expect_rc full 1
  has full "No space left on device"
  has full "$WORK/full/ck"
  grep -q "HDF5-DIAG" "$WORK/full.err" && fail "[14] HDF5's error stack was printed"
  ls "$WORK/full/ck" | grep -q partial && fail "[14] a .partial was left taking the space"
  "$LOOM" ckpt inspect "$WORK/full/ck/step_00000002" > /dev/null || fail "[14] the previous checkpoint is damaged"
  echo "[14] full disk, checked before writing: $(grep -h "No space" "$WORK/full.err" | head -1 | cut -c1-200)"
  umount "$WORK/full"
  mount -t tmpfs -o size=32m tmpfs "$WORK/full"
  r fit --set train.steps=2 --set checkpoint.dir="$WORK/full/ck" --set log.dir="$WORK/l13"
  expect_rc fit 0
  data=$(python3 -c "
import json; m = json.load(open('$WORK/full/ck/step_00000002/manifest.json'))
print(sum(d['bytes'] for d in m['files'][0]['datasets']))")
  avail=$(( $(stat -f -c '%a*%S' "$WORK/full" ) ))
  fallocate -l $(( avail - data - 65536 )) "$WORK/full/filler"
  r fullwrite --set train.steps=4 --set checkpoint.dir="$WORK/full/ck" --set log.dir="$WORK/l14"
  expect_rc fullwrite 1
  has fullwrite "No space left on device"
  has fullwrite "$WORK/full/ck/step_00000004"
  grep -q "HDF5-DIAG" "$WORK/fullwrite.err" && fail "[14] HDF5's error stack was printed"
  # Loom's own report is one line (Open MPI's OMPIO adds its own "error in (p)write(v)" lines).
  [ "$(grep -c "^loom: .*failed" "$WORK/fullwrite.err")" = 1 ] || { cat "$WORK/fullwrite.err"; fail "[14] not one error line"; }
  has fullwrite "^loom: .*step_00000004.*No space left on device"
  ls "$WORK/full/ck" | grep -q partial && fail "[14] a .partial was left taking the space"
  rm "$WORK/full/filler"
  r afterfull --set train.steps=4 --set checkpoint.dir="$WORK/full/ck" --set log.dir="$WORK/l15"
  expect_rc afterfull 0
  has afterfull "resumed from .*step_00000002"
  echo "[14] full disk during the write: $(grep -h "^loom.*No space" "$WORK/fullwrite.err" | head -1 | cut -c1-200)"
  umount "$WORK/full"
else
  echo "[14] skipped: cannot mount a tmpfs here (not root?)"
fi

# [11] Resume under another seed: refused, then allowed with consent; another global batch: the
# exact next sample, said.
ck3=$WORK/ck3
r s0 --set train.steps=4 --set checkpoint.dir="$ck3" --set log.dir="$WORK/l16"
r seed --set train.steps=6 --set train.seed=7 --set checkpoint.dir="$ck3" --set log.dir="$WORK/l17"
expect_rc seed 2
has seed "train.seed changed from 1337 to 7"
has seed "checkpoint.allow_changes=true"
! grep -q "resumed from" "$WORK/seed.out" "$WORK/seed.err" || fail "[11] a refused resume said 'resumed from'"
r seedok --set train.steps=6 --set train.seed=7 --set checkpoint.allow_changes=true --set checkpoint.dir="$ck3" \
  --set log.dir="$WORK/l18"
expect_rc seedok 0
has seedok "resuming: train.seed changed from 1337 to 7"
# (said after the line naming the checkpoint it resumed from)
grep -A3 "resumed from .*step_00000004" "$WORK/seedok.out" | grep -q "resuming: train.seed changed" ||
  { cat "$WORK/seedok.out"; fail "[11] the change was not said after 'resumed from'"; }
r gb --set train.steps=8 --set train.seed=7 --set train.global_batch=64 --set checkpoint.dir="$ck3" \
  --set log.dir="$WORK/l19"
expect_rc gb 0
has gb "the global batch changed from 32 to 64 samples: continuing at sample 192 of the stream (step 6)"
grep -q '"next_sample": 320' "$ck3/step_00000008/manifest.json" || fail "[11] step 8 should start at sample 192 + 2 x 64"
# [11] The same number of samples, two tokens swapped in the file: refused, then allowed with
# consent (the checkpoint records the data's token count and CRC-32C).
cp data/fortunes/train_000000.bin "$WORK/train.bin"
ckfp=$WORK/ck_fingerprint
r fp0 --set train.steps=2 --set data.train="$WORK/train.bin" --set checkpoint.dir="$ckfp" --set log.dir="$WORK/l30"
expect_rc fp0 0
grep -q '"data_crc32c"' "$ckfp/step_00000002/manifest.json" || fail "[11] the manifest records no data fingerprint"
swap_two_tokens "$WORK/train.bin"
r fp1 --set train.steps=4 --set data.train="$WORK/train.bin" --set checkpoint.dir="$ckfp" --set log.dir="$WORK/l31"
expect_rc fp1 2
has fp1 "the training data's tokens changed ([0-9]* tokens of CRC-32C [0-9a-f]* at the checkpoint, now"
has fp1 "checkpoint.allow_changes=true"
r fp2 --set train.steps=4 --set data.train="$WORK/train.bin" --set checkpoint.allow_changes=true \
  --set checkpoint.dir="$ckfp" --set log.dir="$WORK/l32"
expect_rc fp2 0
has fp2 "resuming: the training data's tokens changed .*goes on at sample 64 of the same order, in the new data"
# data.val is recorded too; a changed one needs no consent, and the resume says val_loss changes ground.
grep -q '"val_crc32c": [0-9]' "$ckfp/step_00000004/manifest.json" || fail "[11] the manifest records no data.val fingerprint"
cp data/fortunes/val_000000.bin "$WORK/val.bin"
swap_two_tokens "$WORK/val.bin"
r fp3 --set train.steps=6 --set data.train="$WORK/train.bin" --set data.val="$WORK/val.bin" --set checkpoint.dir="$ckfp" \
  --set log.dir="$WORK/l33"
expect_rc fp3 0
has fp3 "resuming: data.val's tokens changed ([0-9]* tokens of CRC-32C [0-9a-f]* at the checkpoint, now [0-9]* of [0-9a-f]*): val_loss from here on is over other tokens"

# [15] Stopped early: 75 with a checkpoint, 4 with nothing saved. train.max_minutes of 0.001
# (60 ms) leaves no room for a second step.
r stopsave --set train.steps=50 --set train.max_minutes=0.001 --set checkpoint.dir="$WORK/ck4" --set log.dir="$WORK/l20"
expect_rc stopsave 75
has stopsave "a checkpoint was saved: run the same command again to resume (exit status 75)"
r stopnone --set train.steps=50 --set train.max_minutes=0.001 --set log.dir="$WORK/l21"
expect_rc stopnone 4
has stopnone "checkpoint.dir is not set, so nothing was saved: running again starts over"
python3 -c "
import json
s = json.load(open('$WORK/l21/run.json'))['sessions'][-1]
assert s['exit_status'] == 4, s
" || fail "[15] run.json does not record exit status 4"

# [19] The summary speaks of this session: two steps after a resume at 8; nothing to train below.
r two --set train.steps=10 --set checkpoint.dir="$ck3" --set train.seed=7 --set train.global_batch=64 \
  --set log.dir="$WORK/l22" --set log.eval_every=5
expect_rc two 0
has two "loom: trained 2 steps this session, to step 10 (resumed at step 8), final loss [0-9.]*, val loss [0-9]\.[0-9][0-9][0-9][0-9], [0-9]* tokens/s"
r none --set train.steps=5 --set checkpoint.dir="$ck3" --set train.seed=7 --set train.global_batch=64 \
  --set log.dir="$WORK/l23"
expect_rc none 0
has none "loom: nothing to train: the run is at step 10 and train.steps is 5"
grep -q "final loss 0.0000" "$WORK/none.out" && fail "[19] a 0-step session printed a final loss"

# [13] Two jobs on one checkpoint.dir (each with its own log.dir): the second is refused, naming
# the first's pid, before it trains; the first goes on undisturbed.
"$LOOM" train configs/tiny.yaml "${quiet[@]}" --set train.steps=2000 --set log.every=1 --set checkpoint.dir="$WORK/ck5" \
  --set log.dir="$WORK/l25" > "$WORK/first.out" 2>&1 &
first=$!
for _ in $(seq 600); do grep -q "^step" "$WORK/first.out" 2>/dev/null && break; sleep 0.1; done
r second --set train.steps=10 --set checkpoint.dir="$WORK/ck5" --set log.dir="$WORK/l26"
kill -0 "$first" || fail "[13] the first job died"
kill -USR1 "$first"
set +e; wait "$first"; first_rc=$?; set -e
[ "$first_rc" = 75 ] || fail "[13] the first job, stopped with SIGUSR1, exited $first_rc, expected 75"
expect_rc second 2
has second "checkpoint.dir=$WORK/ck5 is in use by another Loom job (.*pid $first"
grep -q "^step" "$WORK/second.out" && fail "[13] the second job trained"
echo "[13] $(head -1 "$WORK/second.err" | cut -c1-160)"

# [8] A model far beyond this machine's memory: refused before allocating, with the plan's figure.
r oom --set model.d_model=8192 --set model.n_layer=64 --set model.n_head=64 --set log.dir="$WORK/l24"
expect_rc oom 2
has oom "out of memory before training: 1 rank(s) on this node need [0-9]* MB (loom plan: [0-9]* MB per rank: parameters"
has oom "MB available"
echo "[8] $(grep -h "out of memory" "$WORK/oom.err" | cut -c1-160)"
# ... and an allocation that fails anyway (here: a 3 GB address-space limit, which the check
# against MemAvailable cannot see) names what was being allocated and the plan's figures.
set +e
(ulimit -v 3000000; t --set model.d_model=1024 --set model.n_head=8 --set model.n_layer=24 --set log.dir="$WORK/l27") \
  > "$WORK/oomv.out" 2> "$WORK/oomv.err"; echo $? > "$WORK/oomv.rc"
set -e
expect_rc oomv 2
has oomv "out of memory allocating the model (parameters, gradients, activations) (loom plan predicts [0-9]* MB per rank"
grep -q "std::bad_alloc" "$WORK/oomv.err" && fail "[8] a bare std::bad_alloc"
echo "[8] $(grep -h "out of memory" "$WORK/oomv.err" | cut -c1-160)"
echo PASS
