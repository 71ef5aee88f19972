# Asking for the CUDA backend where it cannot run is a clear error with status 2, never a crash.
# Where a GPU is usable this test does not apply (it would train) and reports itself skipped.
# The CUDA backend is a module loaded only for train.backend=cuda: the loom binary itself must
# not pull in cuBLASLt (every CPU run would pay ~150 MB for it), and the module must load and
# answer through its entry point.
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
if "$LOOM" --version | grep -q "^backends: .*cuda (" && ! "$LOOM" --version | grep -q "no device"; then
  echo "SKIP: a CUDA device is usable here"; exit 77
fi
set +e
"$LOOM" train "$SRC/configs/tiny.yaml" --set train.backend=cuda --set log.dir="$WORK/run" 2> "$WORK/err"; rc=$?
set -e
cat "$WORK/err"
[ "$rc" = 2 ] || fail "exit status $rc, expected 2"
grep -q "train.backend=cuda" "$WORK/err" || fail "the message does not name train.backend"
if ldd "$LOOM" | grep -q cublasLt; then fail "the loom binary links cuBLASLt (it belongs in libloom_cuda.so)"; fi
module="$(dirname "$LOOM")/libloom_cuda.so"
if [ -f "$module" ]; then
  python3 - "$module" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
create = lib.loom_cuda_create_backend
create.restype = ctypes.c_void_p
err = ctypes.create_string_buffer(512)
assert create(0, err, 512) is None, "a backend without a device?"
assert err.value, "no reason given"
print("libloom_cuda.so loads; without a device it says:", err.value.decode())
PY
fi
echo PASS
