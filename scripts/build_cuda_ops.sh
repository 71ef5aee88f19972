#!/usr/bin/env bash
# Builds only the CUDA backend and its checks: loom_kernels (the CPU reference they compare
# against), libloom_cuda.so, tests/test_cuda_ops, tests/test_cuda_flash_attention,
# tests/bench_cuda_ops, compare_cuda_training and bench_gpt_training, into build-gpu/ (or
# $LOOM_BUILD_DIR). Needs the CUDA toolkit, a C++ compiler with OpenMP, Eigen 3.4 and Catch2 2.x
# (found the CMake way): no MPI, HDF5, yaml-cpp, CLI11 or OpenBLAS. For a bare GPU machine, make
# a relocatable prefix of Eigen and Catch2 here, carry it there, and point this script at it:
#   scripts/build_cuda_ops.sh --make-deps .devcarry/prefix      (here: copies the installed ones)
#   scripts/build_cuda_ops.sh --deps .devcarry/prefix            (there)
# Architectures: $LOOM_CUDA_ARCHS, default 90 (H100; "80;90" is what the full build compiles).
# Extra arguments go to cmake's configure step. Then:
#   build-gpu/tests/test_cuda_ops && build-gpu/tests/test_cuda_flash_attention
#   compute-sanitizer --tool memcheck build-gpu/tests/test_cuda_ops
#   build-gpu/tests/bench_cuda_ops && python3 scripts/torch_ops_bench.py
# scripts/gpu_check.sh runs all of it in one device call (logs packed into $OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LOOM_BUILD_DIR:-build-gpu}
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --make-deps)
      dir=${2:?--make-deps DIR}
      mkdir -p "$dir/include" "$dir/share/eigen3" "$dir/lib/cmake"
      cp -r /usr/include/eigen3 /usr/include/catch2 "$dir/include/"
      cp -r /usr/share/eigen3/cmake "$dir/share/eigen3/"
      cp -r /usr/lib/cmake/Catch2 "$dir/lib/cmake/"
      cp /usr/lib/libCatch2WithMain.a "$dir/lib/"  # Catch2's exported targets insist on it
      echo "build_cuda_ops.sh: Eigen and Catch2 copied into $dir ($(du -sh "$dir" | cut -f1))"
      exit 0 ;;
    --deps) cmake_args+=("-DCMAKE_PREFIX_PATH=$(cd "${2:?--deps DIR}" && pwd)"); shift 2 ;;
    *) cmake_args+=("$1"); shift ;;
  esac
done
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_TESTS=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=${LOOM_CUDA_ARCHS:-90}" ${cmake_args[@]+"${cmake_args[@]}"}
cmake --build "$build" -j "$(nproc)" --target test_cuda_ops test_cuda_flash_attention bench_cuda_ops \
  compare_cuda_training bench_gpt_training
