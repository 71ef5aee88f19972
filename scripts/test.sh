#!/usr/bin/env bash
# From a fresh Debian 12 machine: install the dependencies, build, and run the whole test suite
# (unit tests, finite-difference and PyTorch-golden checks, end-to-end and mpirun tests).
#   scripts/test.sh [ctest arguments, e.g. -L unit or -R recipe]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${LOOM_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" "$@"
