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
# Five saves: on this VM the first save of a process (and the first dd) writes at a fraction of
# the later ones' speed (docs/checkpoints.md), so the figure compared with dd is the best.
sync_out=$(run --set checkpoint.dir="$dir/sync" --set checkpoint.every=3 --set train.steps=15 --set checkpoint.keep_last=1 \
               --set log.dir="$dir/r1")
load_out=$(run --set checkpoint.resume="$dir/sync/step_00000015" --set train.steps=16 --set log.dir="$dir/r2")
# The same load and a dd read of the file with the page cache emptied first (root only).
cold_out="" dd_read_out=""
if sync && echo 3 2>/dev/null > /proc/sys/vm/drop_caches; then
  cold_out=$(run --set checkpoint.resume="$dir/sync/step_00000015" --set train.steps=16 --set log.dir="$dir/r6")
  sync && echo 3 > /proc/sys/vm/drop_caches
  dd_read_out=$(dd if="$dir/sync/step_00000015/model.h5" of=/dev/null bs=4M 2>&1 | tail -1)
fi
# Stalls: one save in the middle of a 12-step run (step 6) and one at the end, sync and async.
stall_run() { run --set train.steps=12 --set checkpoint.every=6 --set checkpoint.keep_last=1 "$@"; }
sync12_out=$(stall_run --set checkpoint.dir="$dir/sync12" --set log.dir="$dir/r5")
async_out=$(stall_run --set checkpoint.dir="$dir/async" --set checkpoint.async=true --set log.dir="$dir/r3")
none_out=$(run --set train.steps=12 --set log.dir="$dir/r4")
bytes=$(stat -c %s "$dir"/sync/step_00000015/model.h5)
# dd three times, like the three saves (best of each is compared).
dd_out=""
for i in 1 2 3; do
  dd_out+="$(dd if=/dev/zero of="$dir/dd.bin" bs=4M count=$(( bytes / 4194304 + 1 )) conv=fdatasync 2>&1 | tail -1)"$'\n'
  rm -f "$dir/dd.bin"
done
python3 - "$bytes" "$dd_out" "$dd_read_out" <<PY
import re, sys
bytes_, dd, dd_read = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def nums(pattern, text):
    return [float(x) for x in re.findall(pattern, text)]
def dd_gbs(text):
    return [float(v) / (1000 if u == "MB" else 1) for v, u in re.findall(r"([0-9.]+) (GB|MB)/s", text)]
saves = re.findall(r"MB complete in ([0-9.]+) s, ([0-9.]+) GB/s: data written in ([0-9.]+) s, fsync ([0-9.]+) s, "
                   r"checksums, manifest and rename ([0-9.]+) s", """$sync_out""")
best = max(saves, key=lambda s: float(s[1]))
load = nums(r"read and verified [0-9.]+ MB in [0-9.]+ s, ([0-9.]+) GB/s", """$load_out""")
cold = nums(r"read and verified [0-9.]+ MB in [0-9.]+ s, ([0-9.]+) GB/s", """$cold_out""")
dd_w = max(dd_gbs(dd))
def stall(text):
    return float(re.search(r"checkpoint stalls ([0-9.]+) ms", text).group(1))
def step_ms(text):
    return [float(x) for x in re.findall(r"\| ([0-9.]+) ms \| data wait", text)]
base = sum(step_ms("""$none_out""")[1:]) / len(step_ms("""$none_out""")[1:])
print(f"checkpoint: {bytes_ / 1e6:.0f} MB (parameters + Adam m, v of 51M parameters), $np ranks, one shared HDF5 file")
print(f"disk sequential write (dd bs=4M, fdatasync), best of 3: {dd_w:.2f} GB/s"
      f" (all: {', '.join(f'{x:.2f}' for x in dd_gbs(dd))})")
print(f"save, complete (write, fsync, checksums, manifest, rename), best of {len(saves)}: {float(best[1]):.2f} GB/s"
      f" = {100 * float(best[1]) / dd_w:.0f}% of dd (all: {', '.join(s[1] for s in saves)});"
      f" best: data {best[2]} s, fsync {best[3]} s, rest {best[4]} s")
print(f"load (read, verify, install), file in page cache: {load[0]:.2f} GB/s")
if cold and dd_read:
    r = dd_gbs(dd_read)[0]
    print(f"load, page cache emptied first:   {cold[0]:.2f} GB/s = {100 * cold[0] / r:.0f}% of dd reading the file cold ({r:.2f} GB/s)")
print(f"step time without checkpoints:           {base:.0f} ms")
for name, text in (("sync", """$sync12_out"""), ("async", """$async_out""")):
    s = stall(text) / 2  # two saves per run (step 6 and the end)
    print(f"stall per save, {name:5s}:                 {s:.0f} ms = {100 * s / base:.0f}% of a step;"
          f" saving every 100 steps would cost {100 * s / (100 * base):.2f}% of step time")
PY
rm -rf "$dir"
