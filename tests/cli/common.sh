# Shared by the end-to-end test scripts: arguments, mpirun for root in a container, helpers.
set -euo pipefail
# A command that ends the script through set -e says which, instead of a silent exit status.
# (ERR also fires under set +e, where a test looks at the status itself: only with -e on;
# errtrace: inside functions too, where most of the tests' commands run.)
set -o errtrace
trap 'err_rc=$?; [[ $- != *e* ]] || echo "FAIL: ${BASH_SOURCE[0]:-$0}:$LINENO: \"$BASH_COMMAND\" exited $err_rc" >&2' ERR
LOOM=$1
SRC=$2
MPIEXEC=${3:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Quiet Open MPI's "help" aggregation and forks warnings; keep real errors.
export OMPI_MCA_rmaps_base_oversubscribe=1
# A fixed MFU peak (docs/model.md): rank 0 would otherwise measure the CPU's gemm rate at every
# start, about 0.3-0.5 s of the cores per launch, hundreds of launches over the suite. The
# measurement itself is tested by train_tiny_learns_deterministically, which unsets this.
export LOOM_PEAK_TFLOPS=1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/loom_test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# --bind-to none: with 1-2 ranks Open MPI pins each to one core, starving the OpenMP threads.
mpi() { "$MPIEXEC" --oversubscribe --bind-to none "$@"; }
# The model of the tests whose property does not depend on the model's size (parallel layouts,
# ZeRO, checkpoints, launchers, precision): the tiny recipe at half its width and half its
# sequence length, a fifth of its compute per step (the suite must fit 20 minutes on 2 cores).
# It keeps tiny's 4 layers, 4 heads and 257-token vocabulary (which divides by no tp). At tiny's
# lr of 3e-3 this shape spikes and turns chaotic after step 20 (summation-order differences
# between layouts grow to 1e-3 of the grad norm by step 30); at 1e-3 it learns smoothly (5.5 to
# 2.8 nats in 150 steps) and layouts agree to ~1e-8.
# (SMALL_SHAPE alone where a test sets the learning rate itself. No commas in these values: the
# Slurm tests pass "${SMALL[*]}" inside sbatch --export, which splits at commas.)
SMALL_SHAPE=(--set model.d_model=64 --set model.seq_len=32)
SMALL=("${SMALL_SHAPE[@]}" --set optim.lr=1e-3)
# The demo corpus, made once per build tree.
corpus() { bash "$SRC/scripts/prepare_fortunes.sh" "$SRC/data/fortunes" "$LOOM" >/dev/null; }
# Swaps the first two different neighbouring uint16 tokens at or after byte 4096 of a token file
# (past its header, on a token boundary), in place: the same size and token count, other data.
swap_two_tokens() {
  python3 - "$1" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, 'rb').read())
i = 4096
while data[i:i + 2] == data[i + 2:i + 4]:
    i += 2
data[i:i + 2], data[i + 2:i + 4] = data[i + 2:i + 4], data[i:i + 2]
with open(path, 'r+b') as f:
    f.write(data)
PY
}
