# Shared by the end-to-end test scripts: arguments, mpirun for root in a container, helpers.
set -euo pipefail
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
