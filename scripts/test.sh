#!/usr/bin/env bash
# From a fresh Debian 12 machine: install the dependencies, build, and run the whole test suite
# (unit tests, finite-difference and PyTorch-golden checks, end-to-end and mpirun tests).
#   scripts/test.sh [ctest arguments, e.g. -L unit or -R recipe]
# Without arguments the slow fault cases of the simulated cluster (label cluster_long) are left
# out, to keep the suite within its time budget; `scripts/test.sh -L cluster` runs every cluster
# test, those included.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The real GPT-2 tokenizer for the tests that need it (they report themselves skipped without it).
scripts/fetch_gpt2_tokenizer.sh || echo "test.sh: GPT-2 tokenizer files unavailable; the tests needing them will skip"
scripts/build.sh
cd "${LOOM_BUILD_DIR:-build}"
if [ $# -eq 0 ]; then set -- -LE cluster_long; fi
ctest --output-on-failure -j "$(nproc)" "$@"
