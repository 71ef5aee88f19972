# `loom bench comm` runs every collective on 3 ranks (a group size that divides nothing evenly)
# and finds every result exact; then bf16 through each MPI way of reducing it.
source "$(dirname "$0")/../cli/common.sh"
export OMP_NUM_THREADS=1
mpi -np 3 "$LOOM" bench comm --max-bytes 1048576 --iters 3 | tee "$WORK/out"
[ "$(grep -c -E ' (all_reduce|reduce_scatter|all_gather) ' "$WORK/out")" = 18 ] || fail "expected 6 sizes (1 KiB .. 1 MiB) x 3 ops"
grep -q "^# total #wrong: 0$" "$WORK/out" || fail "wrong results"
# bf16, both ways MPI reduces it: every sum still exact.
for how in user_op fp32; do
  mpi -np 3 "$LOOM" bench comm --dtype bf16 --half-reduce $how --max-bytes 65536 --iters 2 | tee "$WORK/out16"
  grep -q "^# total #wrong: 0$" "$WORK/out16" || fail "wrong bf16 results ($how)"
done
echo PASS
