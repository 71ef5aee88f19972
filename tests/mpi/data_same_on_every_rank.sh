# data.train must hold the same tokens on every rank. Two ranks started by one mpirun in different
# working directories (MPMD, `-wdir`), each reading its own relative train.bin, stand for
# node-local copies of the data:
#   1. identical copies: the job trains;
#   2. rank 1's copy has two neighbouring tokens swapped (same size, same samples per epoch): the
#      job is refused before training (exit 2), naming rank 1 and both fingerprints once, with no
#      run directory made.
source "$(dirname "$0")/../cli/common.sh"
WORK=$(cd "$WORK" && pwd -P)
corpus
export OMP_NUM_THREADS=1
for node in a b; do mkdir -p "$WORK/$node" && cp "$SRC/data/fortunes/train_000000.bin" "$WORK/$node/train.bin"; done
two_nodes() {  # OUT ARGS...: rank 0 in $WORK/a, rank 1 in $WORK/b, the same arguments
  local out=$1; shift
  set +e
  timeout 90 "$MPIEXEC" --oversubscribe --bind-to none -np 1 -wdir "$WORK/a" "$LOOM" "$@" : \
    -np 1 -wdir "$WORK/b" "$LOOM" "$@" > "$WORK/$out" 2>&1
  rc=$?
  set -e
  [ "$rc" != 124 ] || { cat "$WORK/$out"; fail "$out: the job hung (killed after 90 s)"; }
}
train=(train "$SRC/configs/tiny.yaml" --set train.steps=2 --set log.every=1 --set log.eval_every=0
       --set data.train=train.bin --set data.val="$SRC/data/fortunes")

two_nodes same.out "${train[@]}" --set log.dir="$WORK/same.run"
[ "$rc" = 0 ] || { cat "$WORK/same.out"; fail "identical copies: exit $rc, expected 0"; }

swap_two_tokens "$WORK/b/train.bin"
two_nodes differ.out "${train[@]}" --set log.dir="$WORK/differ.run"
[ "$rc" = 2 ] || { cat "$WORK/differ.out"; fail "rank 1's copy differs: exit $rc, expected 2"; }
pattern="rank 1: data.train=train.bin: this rank reads [0-9]* tokens of CRC-32C [0-9a-f]*, rank 0 reads [0-9]* tokens of CRC-32C [0-9a-f]*: every rank must see the same training data"
n=$(grep -c -- "$pattern" "$WORK/differ.out" || true)
[ "$n" = 1 ] || { cat "$WORK/differ.out"; fail "expected the error once, found $n times"; }
[ ! -e "$WORK/differ.run" ] || fail "a run directory was made"
echo "$(grep -- "$pattern" "$WORK/differ.out" | cut -c1-200)"
