#!/usr/bin/env bash
# Checkpoint save and load throughput for a model of a few hundred MB (L8 D512 V50257: 51M
# parameters, so parameters + Adam moments = 0.6 GB), next to the disk's sequential write
# bandwidth measured with dd (with fdatasync), and the step-time stall of synchronous and
# asynchronous saves.
#   scripts/bench_checkpoint.sh [RANKS] [DIR]     (defaults: 2, /tmp/loom-bench-ckpt)
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:-2}
dir=${2:-/tmp/loom-bench-ckpt}
loom=${LOOM:-build/loom}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$dir" && mkdir -p "$dir"
# A synthetic llm.c shard of GPT-2 token ids (the data do not matter here).
python3 - "$dir/tokens.bin" <<'PY'
import array, random, sys
random.seed(0)
n = 200_000
header = array.array("i", [20240520, 1, n] + [0] * 253)
toks = array.array("H", (random.randrange(50257) for _ in range(n)))
with open(sys.argv[1], "wb") as f:
    header.tofile(f); toks.tofile(f)
PY
model=(--set model.n_layer=8 --set model.n_head=8 --set model.d_model=512 --set model.vocab_size=50257
       --set model.seq_len=64 --set train.micro_batch=1 --set train.global_batch="$np" --set data.train="$dir/tokens.bin"
       --set data.val="" --set data.format=llmc --set log.eval_every=0 --set log.every=1 --set train.steps=9)
run() { mpirun -np "$np" --oversubscribe --bind-to none "$loom" train configs/tiny.yaml "${model[@]}" "$@"; }
sync_out=$(run --set checkpoint.dir="$dir/sync" --set checkpoint.every=3 --set checkpoint.keep_last=1 --set log.dir="$dir/r1")
load_out=$(run --set checkpoint.resume="$dir/sync/step_00000009" --set train.steps=10 --set log.dir="$dir/r2")
# Stalls: one save in the middle of a 12-step run (step 6) and one at the end, sync and async.
stall_run() { run --set train.steps=12 --set checkpoint.every=6 --set checkpoint.keep_last=1 "$@"; }
sync12_out=$(stall_run --set checkpoint.dir="$dir/sync12" --set log.dir="$dir/r5")
async_out=$(stall_run --set checkpoint.dir="$dir/async" --set checkpoint.async=true --set log.dir="$dir/r3")
none_out=$(run --set train.steps=12 --set log.dir="$dir/r4")
bytes=$(stat -c %s "$dir"/sync/step_00000009/model.h5)
dd_out=$(dd if=/dev/zero of="$dir/dd.bin" bs=4M count=$(( bytes / 4194304 + 1 )) conv=fdatasync 2>&1 | tail -1)
rm -f "$dir/dd.bin"
python3 - "$bytes" "$dd_out" <<PY
import re, sys
bytes_, dd = int(sys.argv[1]), sys.argv[2]
def nums(pattern, text):
    return [float(x) for x in re.findall(pattern, text)]
saves = nums(r"written in [0-9.]+ s, ([0-9.]+) GB/s", """$sync_out""")
totals = nums(r"with checksum and rename ([0-9.]+) s", """$sync_out""")
load = nums(r"read [0-9.]+ MB in [0-9.]+ s, ([0-9.]+) GB/s", """$load_out""")
m = re.search(r"([0-9.]+) (GB|MB)/s", dd)
dd_gbs = float(m.group(1)) / (1000 if m.group(2) == "MB" else 1)
def stall(text):
    return float(re.search(r"checkpoint stalls ([0-9.]+) ms", text).group(1))
def step_ms(text):
    return [float(x) for x in re.findall(r"\| ([0-9.]+) ms \| data wait", text)]
base = sum(step_ms("""$none_out""")[1:]) / len(step_ms("""$none_out""")[1:])
print(f"checkpoint: {bytes_ / 1e6:.0f} MB (parameters + Adam m, v of 51M parameters), $np ranks, one shared HDF5 file")
print(f"disk sequential write (dd, fdatasync):  {dd_gbs:.2f} GB/s")
print(f"save (HDF5 write + fsync), best of {len(saves)}:     {max(saves):.2f} GB/s = {100 * max(saves) / dd_gbs:.0f}% of dd")
print(f"save incl. CRC-32C pass and rename:      {bytes_ / 1e9 / min(totals):.2f} GB/s")
print(f"load (verify + read):                    {load[0]:.2f} GB/s (file in page cache)")
print(f"step time without checkpoints:           {base:.0f} ms")
for name, text in (("sync", """$sync12_out"""), ("async", """$async_out""")):
    s = stall(text) / 2  # two saves per run (step 6 and the end)
    print(f"stall per save, {name:5s}:                 {s:.0f} ms = {100 * s / base:.0f}% of a step;"
          f" saving every 100 steps would cost {100 * s / (100 * base):.2f}% of step time")
PY
rm -rf "$dir"
