# A job whose memory is capped by a cgroup (Slurm's --mem with ConstrainRAMSpace, a container):
# an elastic resume onto fewer ranks, where each rank's share of the optimizer state grows, must
# be refused by the pre-flight check with the cgroup's figures, exit 2, and leave the checkpoint
# and run directory as they were. Before the check read cgroups it compared with the node's
# MemAvailable, passed, and the kernel killed the rank (SIGKILL, exit 137, no message) once it
# allocated past the limit. Under a cap the resumed run does fit, it trains on.
# Real cgroups: needs root and a cgroup v1 memory hierarchy, as on CI's machines; skipped (77)
# elsewhere. (Under cgroup v2 a child of a cgroup that holds processes gets no memory controller,
# the "no internal process" rule, so the capped cgroups cannot be made this way there; the v2
# files are read the same way and unit-tested in test_memory_room.)
#   memory_cgroup_elastic.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"

# This process's memory cgroup directory (v1 memory hierarchy first, else v2), or nothing.
own_memory_cgroup() {
  local v1 v2
  v1=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
  v2=$(awk -F: '$1 == "0" && $2 == "" {print $3}' /proc/self/cgroup)
  # mountinfo: field 4 the mount's root, 5 its mount point; after " - ": type, source, options.
  awk -v v1="$v1" -v v2="$v2" '{
    for (i = 1; $i != "-"; ++i) {}
    type = $(i + 1); opts = "," $(i + 3) ","
    if (type == "cgroup" && opts ~ /,memory,/ && v1 != "") path = v1
    else if (type == "cgroup2" && v2 != "") path = v2
    else next
    if ($4 != "/" && path != $4 && index(path, $4 "/") != 1) next
    rel = ($4 == "/") ? path : substr(path, length($4) + 1)
    if (rel == "/") rel = ""
    print (type == "cgroup" ? "v1 " : "v2 ") $5 rel
  }' /proc/self/mountinfo | sort | head -1
}
[ "$(id -u)" = 0 ] || { echo "SKIP: making a memory cgroup needs root"; exit 77; }
read -r kind parent <<< "$(own_memory_cgroup)"
[ -n "${parent:-}" ] || { echo "SKIP: no memory cgroup hierarchy is mounted"; exit 77; }
limit_file=memory.limit_in_bytes
[ "$kind" = v2 ] && limit_file=memory.max
# remove_cgroup CG: ends whatever the test left running in it (nothing, normally), then removes it.
remove_cgroup() {
  local cg=$1 pid
  for _ in 1 2 3 4 5; do
    [ -s "$cg/cgroup.procs" ] || break
    while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done < "$cg/cgroup.procs"
    sleep 0.2
  done
  rmdir "$cg" || echo "warning: could not remove the test's cgroup $cg" >&2
}
cleanup() {
  for cg in "$parent"/loom_test_$$_*; do [ -d "$cg" ] && remove_cgroup "$cg"; done
  rm -rf "$WORK"
}
trap cleanup EXIT
# Those of an earlier run killed before its own cleanup (CTest's timeout sends SIGKILL).
for cg in "$parent"/loom_test_*_*; do
  [ -d "$cg" ] || continue
  owner=${cg##*/loom_test_}; owner=${owner%%_*}
  kill -0 "$owner" 2>/dev/null || remove_cgroup "$cg"
done
# make_cgroup NAME MB: a child of this process's cgroup, capped at MB (cleanup removes it).
make_cgroup() {
  local cg="$parent/loom_test_$$_$1"
  mkdir "$cg" 2>/dev/null && [ -f "$cg/$limit_file" ] || return 1
  echo $(( $2 * 1024 * 1024 )) > "$cg/$limit_file" || return 1
  echo "$cg"
}
# in_cgroup CG COMMAND...: runs COMMAND (and everything it starts) inside CG.
in_cgroup() { local cg=$1; shift; ( echo "$BASHPID" > "$cg/cgroup.procs" && exec "$@" ); }
small_cg=$(make_cgroup small 300) || { echo "SKIP: cannot make a memory cgroup under $parent"; exit 77; }
roomy_cg=$(make_cgroup roomy 1200) || { echo "SKIP: cannot make a memory cgroup under $parent"; exit 77; }

corpus
cd "$SRC"
export OMP_NUM_THREADS=1
# 19M parameters at ZeRO-1 (docs/parallelism.md): on 2 ranks each holds half the AdamW moments;
# on 1 rank, with checkpoint.dir set, the plan predicts 682 MB. The cap of 300 MB is far above what a rank takes
# before it allocates the model (~50 MB) and far below its need.
common=(--set model.d_model=512 --set model.n_layer=6 --set model.n_head=8 --set train.micro_batch=2
        --set train.global_batch=4 --set train.steps=4 --set log.every=1 --set log.eval_every=0
        --set parallel.zero=1 --set log.dir="$WORK/run" --set checkpoint.dir="$WORK/ck")
mpi -np 2 "$LOOM" train configs/tiny.yaml "${common[@]}" --set checkpoint.every=2 --set train.stop_at_step=2 \
  > "$WORK/first.out" 2>&1 || { cat "$WORK/first.out"; fail "the 2-rank part failed"; }
fingerprint() { (cd "$WORK" && find ck run -type f -print0 | sort -z | xargs -0 sha256sum); }
before=$(fingerprint)

# [1] One rank under the 300 MB cap: refused before anything large is allocated.
set +e
in_cgroup "$small_cg" "$MPIEXEC" --oversubscribe --bind-to none -np 1 "$LOOM" train configs/tiny.yaml "${common[@]}" \
  > "$WORK/small.out" 2> "$WORK/small.err"
rc=$?
set -e
cat "$WORK/small.err"
[ "$rc" != 137 ] || fail "[1] the kernel killed the rank at the cgroup's limit: the pre-flight check did not see it"
[ "$rc" = 2 ] || { cat "$WORK/small.out"; fail "[1] exited $rc, expected 2"; }
grep -q "out of memory before training: 1 rank(s) on this node need [0-9]* MB" "$WORK/small.err" ||
  fail "[1] no pre-flight refusal"
grep -q "the memory cgroup $small_cg ($limit_file 300 MB, [0-9]* MB in use) leaves [0-9]* MB" "$WORK/small.err" ||
  fail "[1] the refusal does not name the cgroup and its limit"
grep -q "^step" "$WORK/small.out" && fail "[1] the refused run trained"
[ "$(fingerprint)" = "$before" ] || fail "[1] the refused resume changed the checkpoint or the run directory"
echo "[1] $(grep -o "out of memory before training.*leaves [0-9]* MB" "$WORK/small.err" | cut -c1-400)"

# [2] Under 1200 MB the same resume fits: an elastic resume on 1 rank that trains to the end
# within the cap (the kernel enforces it: a rank past it would be killed).
in_cgroup "$roomy_cg" "$MPIEXEC" --oversubscribe --bind-to none -np 1 "$LOOM" train configs/tiny.yaml "${common[@]}" \
  --set checkpoint.every=2 > "$WORK/roomy.out" 2>&1 || { cat "$WORK/roomy.out"; fail "[2] the resume under 1200 MB failed"; }
grep -q "elastic resume: the checkpoint was saved by 2 ranks" "$WORK/roomy.out" || { cat "$WORK/roomy.out"; fail "[2] no elastic resume"; }
grep -q "trained 2 steps this session, to step 4 (resumed at step 2)" "$WORK/roomy.out" ||
  { cat "$WORK/roomy.out"; fail "[2] did not train on to step 4"; }
peak=$(cat "$roomy_cg/memory.max_usage_in_bytes" 2>/dev/null || cat "$roomy_cg/memory.peak" 2>/dev/null || echo 0)
echo "[2] resumed on 1 rank under the 1200 MB cap; the cgroup's peak usage $(( peak / 1048576 )) MB"
echo PASS
