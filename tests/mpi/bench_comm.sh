# `loom bench comm` runs every collective on 3 ranks (a group size that divides nothing evenly)
# and finds every result exact, all-reduce under every algorithm (auto, mpi, ring, hierarchical),
# reduce-scatter under auto, mpi and ring (it has no hierarchical form);
# then bf16 through each MPI way of reducing it; then a chosen list of algorithms with faked nodes
# (2 + 1) and the "% of link" column.
source "$(dirname "$0")/../cli/common.sh"
export OMP_NUM_THREADS=1
mpi -np 3 "$LOOM" bench comm --max-bytes 1048576 --iters 3 | tee "$WORK/out"
[ "$(grep -c -E ' all_gather ' "$WORK/out")" = 6 ] || fail "expected 6 all_gather sizes (1 KiB .. 1 MiB)"
for algo in auto mpi ring hierarchical; do
  [ "$(grep -c -E " all_reduce +$algo " "$WORK/out")" = 6 ] || fail "expected 6 all_reduce sizes under $algo"
done
for algo in auto mpi ring; do
  [ "$(grep -c -E " reduce_scatter +$algo " "$WORK/out")" = 6 ] || fail "expected 6 reduce_scatter sizes under $algo"
done
grep -q -E ' reduce_scatter +hierarchical ' "$WORK/out" && fail "reduce_scatter timed as hierarchical"
grep -q "^# total #wrong: 0$" "$WORK/out" || fail "wrong results"
# bf16, both ways MPI reduces it: every sum still exact, under every algorithm.
for how in user_op fp32; do
  mpi -np 3 "$LOOM" bench comm --dtype bf16 --half-reduce $how --max-bytes 65536 --iters 2 | tee "$WORK/out16"
  grep -q "^# total #wrong: 0$" "$WORK/out16" || fail "wrong bf16 results ($how)"
done
# Two algorithms only, nodes of 2 ranks faked, small ring segments, and the %link column.
mpi -np 3 "$LOOM" bench comm --ops all_reduce --algo ring,hierarchical --ranks-per-node 2 --segment-kib 16 \
  --in-flight 2 --link-gbps 10 --min-bytes 4096 --max-bytes 262144 --iters 2 | tee "$WORK/outl"
[ "$(grep -c -E ' all_reduce +(ring|hierarchical) ' "$WORK/outl")" = 8 ] || fail "expected 4 sizes x 2 algorithms"
grep -q -E ' all_reduce +mpi ' "$WORK/outl" && fail "--algo ring,hierarchical also ran mpi"
grep -q '%link' "$WORK/outl" || fail "no %link column"
grep -q -E ' all_reduce +ring +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+% +0$' "$WORK/outl" || fail "no %link figure on a ring line"
grep -q "^# total #wrong: 0$" "$WORK/outl" || fail "wrong results (faked nodes)"
if mpi -np 2 "$LOOM" bench comm --algo tree --max-bytes 4096 > "$WORK/bad" 2>&1; then fail "--algo tree accepted"; fi
grep -q "tree" "$WORK/bad" || fail "--algo tree: no message naming it"
echo PASS
