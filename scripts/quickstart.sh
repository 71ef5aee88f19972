#!/usr/bin/env bash
# From a fresh Debian 12 machine: install the dependencies, build, prepare the demo corpus
# (real English text from the fortunes package) and train the tiny recipe under mpirun.
#   scripts/quickstart.sh [--set section.key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh > build.log 2>&1 || { tail -40 build.log; echo "quickstart: build failed (full log: build.log)" >&2; exit 1; }
scripts/prepare_fortunes.sh data/fortunes build/loom
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # containers run as root
# --bind-to none: Open MPI pins 1-2 ranks to single cores, which would starve the OpenMP threads.
exec mpirun -np 1 --bind-to none build/loom train configs/tiny.yaml "$@"
