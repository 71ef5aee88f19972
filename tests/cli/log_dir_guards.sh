# log.dir guards (docs/runs.md):
#  1. one job per log.dir: a second `loom train` into the log.dir of a running one exits 2 naming
#     the holder's host and pid; after the first is killed (kill -9), its lock is stale and the
#     next run takes it over with a warning;
#  2. metrics.jsonl is append-only: a fresh start into a log.dir that holds a run appends a
#     session (nothing of the first is lost); a resume from an older checkpoint keeps the rows it
#     redoes and appends a {"session", "resumed_at_step"} marker, so that the run still reads as
#     steps 0..5 once each, with the same losses;
#  3. a full disk under log.dir (a 200 KiB tmpfs, filled mid-run): exit status 1 (not a SIGABRT),
#     "No space left on device" and the file named, and no torn line in metrics.jsonl.
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
host=$(hostname)
rows() {  # the run's rows as the readers take them (markers applied): "step loss" lines
  python3 - "$1" <<'PY'
import json, sys
rows = []
for line in open(sys.argv[1]):
    r = json.loads(line)  # every line is complete JSON
    if "resumed_at_step" in r:
        rows = [x for x in rows if x["step"] < r["resumed_at_step"]]
    else:
        rows.append(r)
for r in rows:
    print(r["step"], r["loss"])
PY
}

# 1. The lock.
"$LOOM" train configs/tiny.yaml --set train.steps=100000 --set log.every=1 --set log.eval_every=0 \
  --set log.dir="$WORK/run" > "$WORK/first.out" 2>&1 &
first=$!
for _ in $(seq 600); do grep -q "^step" "$WORK/first.out" 2>/dev/null && break; sleep 0.1; done
grep -q "^step" "$WORK/first.out" || { kill -9 $first; cat "$WORK/first.out"; fail "lock: the first run never started"; }
set +e
"$LOOM" train configs/tiny.yaml --set train.steps=5 --set log.dir="$WORK/run" > "$WORK/second.out" 2> "$WORK/second.err"; rc=$?
set -e
kill -9 $first; wait $first 2>/dev/null || true
[ "$rc" = 2 ] || fail "lock: the second run exited $rc, expected 2: $(cat "$WORK/second.err")"
grep -q "loom: error: log.dir=$WORK/run is in use by another Loom job (host $host, pid $first, started .*lock file $WORK/run/.loom.lock)" \
  "$WORK/second.err" || fail "lock: message: $(cat "$WORK/second.err")"
echo "second job refused: $(cat "$WORK/second.err")"
[ -f "$WORK/run/.loom.lock" ] || fail "lock: kill -9 of the holder should leave its lock file behind"
lines_before=$(wc -l < "$WORK/run/metrics.jsonl")
cp "$WORK/run/metrics.jsonl" "$WORK/first.jsonl"
# The holder is dead: its lock is stale, taken over with a warning. A fresh start into a log.dir
# that holds a run: appended, with a warning.
"$LOOM" train configs/tiny.yaml --set train.steps=3 --set log.every=1 --set log.eval_every=0 \
  --set log.dir="$WORK/run" > "$WORK/third.out" 2> "$WORK/third.err" || fail "stale lock: the run failed: $(cat "$WORK/third.err")"
grep -q "loom: warning: log.dir=$WORK/run: taking over a stale lock $WORK/run/.loom.lock (left by host $host, pid $first, .*which is not running)" \
  "$WORK/third.err" || fail "stale lock: no warning: $(cat "$WORK/third.err")"
grep -q "loom: warning: log.dir=$WORK/run already holds a run ($lines_before rows in metrics.jsonl); this fresh start is appended to it as session 2" \
  "$WORK/third.err" || fail "fresh start: no warning: $(cat "$WORK/third.err")"
[ ! -e "$WORK/run/.loom.lock" ] || fail "the lock file outlived its job"
cmp -n "$(stat -c %s "$WORK/first.jsonl")" "$WORK/first.jsonl" "$WORK/run/metrics.jsonl" ||
  fail "fresh start: the first run's metrics were changed"
[ "$(sed -n "$((lines_before + 1))p" "$WORK/run/metrics.jsonl")" = '{"session": 2, "resumed_at_step": 0}' ] ||
  fail "fresh start: no session marker after the first run's rows"
[ "$(rows "$WORK/run/metrics.jsonl" | cut -d' ' -f1 | tr '\n' ' ')" = "0 1 2 " ] || fail "fresh start: rows as read: $(rows "$WORK/run/metrics.jsonl")"
python3 -c "import json,sys; s=json.load(open('$WORK/run/run.json'))['sessions']; assert len(s)==2 and s[0]['exit_status'] is None and s[1]['exit_status']==0, s"
echo "stale lock taken over; fresh start appended as session 2 ($lines_before rows of the first run kept)"

# A lock file written by another host (flock cannot be trusted across nodes): refused, with how
# to clear it.
mkdir -p "$WORK/other"
printf 'host: node-elsewhere\npid: 4242\nstarted: 2026-01-01T00:00:00Z\nslurm_job_id: -\n' > "$WORK/other/.loom.lock"
set +e
"$LOOM" train configs/tiny.yaml --set train.steps=2 --set log.dir="$WORK/other" > /dev/null 2> "$WORK/other.err"; rc=$?
set -e
[ "$rc" = 2 ] || fail "other host: exit $rc"
grep -q "is locked by a Loom job on another host (host node-elsewhere, pid 4242.*delete $WORK/other/.loom.lock and run again" \
  "$WORK/other.err" || fail "other host: message: $(cat "$WORK/other.err")"

# 2. A resume from an older checkpoint redoes steps 3..5: their first rows stay on disk.
args=(--set train.steps=6 --set log.every=1 --set log.eval_every=0 --set checkpoint.every=3 --set checkpoint.dir="$WORK/ck"
      --set log.dir="$WORK/r")
"$LOOM" train configs/tiny.yaml "${args[@]}" > /dev/null
cp "$WORK/r/metrics.jsonl" "$WORK/r1.jsonl"
[ -d "$WORK/ck/step_00000003" ] || fail "resume: no checkpoint at step 3: $(ls "$WORK/ck")"
"$LOOM" train configs/tiny.yaml "${args[@]}" --set checkpoint.resume="$WORK/ck/step_00000003" > "$WORK/r2.out"
grep -q "resumed from" "$WORK/r2.out" || fail "resume: did not resume"
cmp -n "$(stat -c %s "$WORK/r1.jsonl")" "$WORK/r1.jsonl" "$WORK/r/metrics.jsonl" || fail "resume: earlier rows changed"
[ "$(sed -n 7p "$WORK/r/metrics.jsonl")" = '{"session": 2, "resumed_at_step": 3}' ] || fail "resume: no marker: $(cat "$WORK/r/metrics.jsonl")"
[ "$(wc -l < "$WORK/r/metrics.jsonl")" = 10 ] || fail "resume: expected 6 + 1 + 3 lines"
diff <(rows "$WORK/r1.jsonl") <(rows "$WORK/r/metrics.jsonl") || fail "resume: the run as read differs from the uninterrupted one"
/usr/bin/python3 "$SRC/scripts/plot_metrics.py" "$WORK/r" -o "$WORK/r.png" > /dev/null || fail "plot_metrics.py failed on a marker"
echo "resume at step 3: 6 rows kept, marker, 3 rows redone; read back as steps 0..5 with identical losses"

# 3. A full disk under log.dir.
if ! { mkdir -p "$WORK/full" && mount -t tmpfs -o size=200k tmpfs "$WORK/full"; } 2>/dev/null; then
  echo "disk full: SKIPPED (cannot mount a tmpfs here: needs root)"; echo PASS; exit 0
fi
trap 'umount "$WORK/full" 2>/dev/null || true; rm -rf "$WORK"' EXIT
# checkpoint.dir is on another disk: the run saves a checkpoint there before it stops.
mpi -np 2 "$LOOM" train configs/tiny.yaml --set train.steps=100000 --set log.every=1 --set log.eval_every=0 \
  --set log.dir="$WORK/full/run" --set checkpoint.dir="$WORK/fullck" > "$WORK/full.out" 2> "$WORK/full.err" &
job=$!
for _ in $(seq 600); do [ "$( (cat "$WORK/full/run/metrics.jsonl" 2>/dev/null || true) | wc -l)" -ge 3 ] && break; sleep 0.1; done
dd if=/dev/zero of="$WORK/full/filler" bs=4k 2>/dev/null || true  # until the disk is full
set +e
wait "$job"; rc=$?
set -e
[ "$rc" = 1 ] || fail "disk full: exit status $rc, expected 1: $(cat "$WORK/full.err")"
grep -q "$WORK/full/run/metrics.jsonl: write failed: No space left on device" "$WORK/full.err" ||
  fail "disk full: message: $(cat "$WORK/full.err")"
! grep -q "terminate called\|Aborted\|core dumped" "$WORK/full.err" || fail "disk full: aborted: $(cat "$WORK/full.err")"
grep -q "metrics.jsonl: write failed: No space left on device.*(a checkpoint of step [0-9]* was saved first)" "$WORK/full.err" ||
  fail "disk full: no checkpoint saved before stopping: $(cat "$WORK/full.err")"
"$LOOM" ckpt inspect "$WORK/fullck" > /dev/null || fail "disk full: the checkpoint saved on the way out does not verify"
python3 -c "
import json, sys
lines = open('$WORK/full/run/metrics.jsonl').read()
assert lines.endswith('\n'), 'torn last line'
print(len([json.loads(l) for l in lines.splitlines()]), 'complete lines')" || fail "disk full: metrics.jsonl has a torn line"
echo "disk full: exit 1, $(grep -m1 "No space left" "$WORK/full.err")"
echo PASS
