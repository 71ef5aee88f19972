# The layering docs/architecture.md states, checked on the sources (what each target links
# enforces the rest):
#   - kernels/ includes nothing of engine/ or parallel/, and no MPI, HDF5 or YAML header;
#   - parallel/ includes of kernels/ only kernels/dtype.hpp (a buffer's DType), nothing of engine/;
#   - engine/ includes no MPI header and calls no MPI function: every collective goes through
#     parallel/.
# Each file is read with its string literals emptied and its // and one-line /* */ comments
# removed, so a key's description that mentions MPI_Allreduce, or a comment, does not count.
#   architecture_layers.sh LOOM SRC
source "$(dirname "$0")/common.sh"
cd "$SRC"
src_files() {
  find "$1" \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.inc' \
    -o -name '*.def' \) | sort
}
# FILE:LINE:code of every line of the tree's files matching the extended regex, in code only.
code_matching() {  # DIR REGEX
  local f
  for f in $(src_files "$1"); do
    sed -E -e 's/"([^"\\]|\\.)*"/""/g' -e 's:/\*.*\*/::g' -e 's://.*$::' "$f" | grep -nE "$2" | sed "s|^|$f:|" || true
  done
}
# Includes are matched before strings are emptied (the path is a string).
includes_matching() {  # DIR REGEX (on what follows #include)
  src_files "$1" | xargs grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*$2" || true
}
bad=$(includes_matching kernels '[<"](\.\./)*(engine/|parallel/|mpi\.h|hdf5|H5[A-Za-z]*\.h|yaml-cpp/)')
[ -z "$bad" ] || fail "kernels/ includes what it must not:
$bad"
bad=$(includes_matching parallel '[<"](\.\./)*(kernels|engine)/' | grep -vE 'include[[:space:]]*"kernels/dtype\.hpp"' || true)
[ -z "$bad" ] || fail "parallel/ includes what it must not:
$bad"
bad=$(includes_matching engine '[<"](\.\./)*mpi\.h[">]')
bad+=$(code_matching engine '\bMPI_[A-Z][A-Za-z_]*[[:space:]]*\(')
[ -z "$bad" ] || fail "engine/ uses MPI directly (go through parallel/):
$bad"
echo "kernels/, parallel/ and engine/ keep their layers ($(src_files kernels | wc -l) + $(src_files parallel | wc -l) + $(src_files engine | wc -l) files)"
echo PASS
