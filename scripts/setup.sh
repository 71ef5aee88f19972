#!/usr/bin/env bash
# Installs every Debian 12 package Loom needs. Idempotent and non-interactive: safe to re-run.
#   scripts/setup.sh          build + test dependencies, and the demo corpus
#   scripts/setup.sh --dev    also PyTorch, h5py and matplotlib (golden files, benchmarks, plots)
# The CUDA 13 toolkit is not a Debian package: it is expected in /usr/local/cuda (optional;
# without nvcc the CUDA backend is simply not compiled).
set -euo pipefail

dev=0
for a in "$@"; do
  case "$a" in
    --dev) dev=1 ;;
    *) echo "setup.sh: unknown option '$a' (expected --dev)" >&2; exit 2 ;;
  esac
done

pkgs=(
  build-essential cmake pkg-config git
  libopenmpi-dev openmpi-bin            # MPI 4.1: ranks, communicators
  libhdf5-openmpi-dev hdf5-tools        # parallel HDF5 1.10 for checkpoints; h5dump
  libyaml-cpp-dev                       # recipes
  libeigen3-dev libopenblas-openmp-dev libopenblas0-openmp  # CPU backend (Eigen + OpenBLAS sgemm)
  libdnnl-dev                           # CPU backend: oneDNN 2.x bf16 matmuls (optional at build time)
  catch2                                # unit tests (v2.13)
  libcli11-dev                          # the loom command line
  libpcre2-dev                          # GPT-2 BPE pre-tokenisation regex (Unicode classes)
  nlohmann-json3-dev                    # vocab.json, data manifests
  fortunes                              # ~2.4 MB of real English text for the demo and tests
  python3-matplotlib                    # scripts/plot_metrics.py
  python3-numpy                         # tests/pretrained/gpt2_numpy.py: the independent GPT-2 reference
  curl                                  # scripts/fetch_gpt2_tokenizer.sh: OpenAI's GPT-2 BPE files
  slurmctld slurmd slurm-client munge   # a one-node Slurm cluster for the Slurm template tests
)
if [ "$dev" = 1 ]; then
  pkgs+=(python3-torch python3-numpy python3-h5py python3-regex)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup.sh: all ${#pkgs[@]} packages already installed"
  exit 0
fi
echo "setup.sh: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
