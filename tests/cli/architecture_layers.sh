# The layering docs/architecture.md states, checked on the sources (what each target links
# enforces the rest):
#   - kernels/ includes nothing of engine/ or parallel/, and no MPI, HDF5 or YAML header;
#   - parallel/ includes of kernels/ only kernels/dtype.hpp (a buffer's DType), nothing of engine/;
#   - engine/ includes no <mpi.h> and calls no MPI function: every collective goes through parallel/.
#   architecture_layers.sh LOOM SRC
source "$(dirname "$0")/common.sh"
cd "$SRC"
src_files() { find "$1" -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.inc' -o -name '*.def'; }
bad=$(src_files kernels | xargs grep -nE '#include +[<"](engine/|parallel/|mpi\.h|hdf5|H5|yaml-cpp/)' || true)
[ -z "$bad" ] || fail "kernels/ includes what it must not:
$bad"
bad=$(src_files parallel | xargs grep -nE '#include +"(kernels/|engine/)' | grep -v '#include "kernels/dtype.hpp"' || true)
[ -z "$bad" ] || fail "parallel/ includes what it must not:
$bad"
# A call: MPI_Name( outside a string literal (a key's description may mention MPI_Allreduce).
bad=$(src_files engine | xargs grep -nE '#include +<mpi\.h>|\bMPI_[A-Z][A-Za-z_]*[[:space:]]*\(' | grep -vE '"[^"]*MPI_[A-Za-z_]*' || true)
[ -z "$bad" ] || fail "engine/ uses MPI directly (go through parallel/):
$bad"
echo "kernels/, parallel/ and engine/ keep their layers ($(src_files kernels | wc -l) + $(src_files parallel | wc -l) + $(src_files engine | wc -l) files)"
echo PASS
