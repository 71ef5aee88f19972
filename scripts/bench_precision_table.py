#!/usr/bin/env python3
"""The table of scripts/bench_cpu.sh: Loom and PyTorch at fp32 and bf16, against the gemm ceilings.

Reads results.tsv, one record per line of tab-separated key=value fields:
    load=start|end avg1=<1-minute load average> cores=<n>
    gemm=<dtype> round=<r> status=ok gflops=<float>            (or status=fail note=<why>)
    variant=<engine>-<dtype> round=<r> status=ok tokens_per_s=<float> [peak_rss_mb=<float>] [act_mb=<float>]
    variant=<engine>-<dtype> round=<r> status=fail note=<why>
and prints, nccl-tests style, per variant the min / median / max tokens/s, the model GFLOP/s and
MFU at the median against the gemm rate of the variant's dtype (the best over all rounds), peak RSS
and activation memory; then the ratios the mixed-precision targets are about, from the medians, from
the best runs, and round by round (both variants of a round ran back to back).

Model FLOPs per token: 6N + 12 L C T (docs/model.md), N = 12 L C^2 + V C.
"""

import argparse
import statistics
from collections import defaultdict

L, NH, C, T, B, V = 6, 6, 384, 256, 8, 257   # configs/bench-cpu.yaml
N_PARAMS = 12 * L * C * C + V * C
FLOPS_PER_TOKEN = 6 * N_PARAMS + 12 * L * C * T

VARIANTS = ("loom-fp32", "loom-bf16", "torch-fp32", "torch-bf16")
# (numerator, denominator, target or None)
RATIOS = (("loom-bf16", "loom-fp32", 2.0),
          ("loom-bf16", "torch-bf16", 1.5),
          ("loom-fp32", "torch-fp32", None),
          ("torch-bf16", "torch-fp32", None))


def read_records(path):
    records = []
    with open(path) as f:
        for line in f:
            fields = [kv.split("=", 1) for kv in line.rstrip("\n").split("\t") if "=" in kv]
            if fields:
                records.append(dict(fields))
    return records


def fmt(x, spec, missing="-"):
    return missing if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="results.tsv written by bench_cpu.sh")
    ap.add_argument("--threads", default="?")
    args = ap.parse_args()
    records = read_records(args.results)

    # Gemm ceilings: the best rate of each dtype over the rounds, or why there is none.
    ceiling, ceiling_note = {}, {}
    for r in (r for r in records if "gemm" in r):
        if r.get("status") == "ok":
            ceiling[r["gemm"]] = max(ceiling.get(r["gemm"], 0.0), float(r["gflops"]))
        else:
            ceiling_note[r["gemm"]] = r.get("note", "failed")

    runs = defaultdict(list)        # variant -> ok records
    failures = defaultdict(list)    # variant -> (round, note)
    for r in (r for r in records if "variant" in r):
        if r.get("status") == "ok" and r.get("tokens_per_s"):
            runs[r["variant"]].append(r)
        else:
            failures[r["variant"]].append((r.get("round", "?"), r.get("note", "no tokens/s line")))
    rounds = max((int(r["round"]) for r in records if r.get("round", "").isdigit()), default=0)

    print(f"# model L{L} H{NH} D{C} T{T} B{B} V{V}: {N_PARAMS / 1e6:.2f}M params (unpadded), "
          f"{FLOPS_PER_TOKEN / 1e6:.1f} MFLOP/token; {args.threads} threads; "
          f"{rounds} round(s), the four variants alternating")
    load = {r["load"]: r for r in records if "load" in r}
    if load:
        cores = next(iter(load.values())).get("cores", "?")
        busy = any(float(r.get("avg1", 0)) > float(args.threads if args.threads.isdigit() else 1e9)
                   for r in load.values())
        print("# load average (1 min) " + ", ".join(f"at {k} {r.get('avg1', '?')}" for k, r in load.items())
              + f" on {cores} cores" + (": above the thread count, so other work shared the cores;"
                                         " expect slow, scattered figures" if busy else ""))
    for dtype in ("fp32", "bf16"):
        if dtype in ceiling:
            print(f"# {dtype} gemm ceiling: {ceiling[dtype]:.1f} GFLOP/s "
                  f"(loom bench gemm{'' if dtype == 'fp32' else ' --dtype ' + dtype} -n 2048, "
                  f"best of 5 reps, best over rounds)")
        else:
            print(f"# {dtype} gemm ceiling: n/a ({ceiling_note.get(dtype, 'not measured')})")
    print("#")
    print(f"# {'variant':<10s} {'runs':>4s} {'#fail':>5s} {'tok/s min':>9s} {'median':>7s} {'max':>7s} "
          f"{'GFLOP/s':>8s} {'MFU':>7s} {'peakRSS MB':>10s} {'act MB':>7s}")
    medians = {}
    for v in VARIANTS:
        ok, failed = runs.get(v, []), failures.get(v, [])
        head = f"  {v:<10s} {len(ok) + len(failed):4d} {len(failed):5d}"
        if not ok:
            note = failed[-1][1] if failed else "not run"
            print(f"{head}   failed: {note}")
            continue
        tps = sorted(float(r["tokens_per_s"]) for r in ok)
        med = statistics.median(tps)
        medians[v] = med
        gflops = med * FLOPS_PER_TOKEN / 1e9
        peak = ceiling.get(v.split("-")[1])
        mfu = None if peak is None else 100 * gflops / peak
        rss = max((float(r["peak_rss_mb"]) for r in ok if r.get("peak_rss_mb")), default=None)
        act = max((float(r["act_mb"]) for r in ok if r.get("act_mb")), default=None)
        print(f"{head} {tps[0]:9.0f} {med:7.0f} {tps[-1]:7.0f} {gflops:8.1f} "
              f"{'    n/a' if mfu is None else f'{mfu:6.1f}%':>7s} "
              f"{fmt(rss, '10.1f'):>10s} {fmt(act, '7.1f'):>7s}")
    print("#   MFU: model GFLOP/s at the median over the gemm ceiling of the variant's dtype; "
          "act MB: Loom's activation memory (rank 0)")

    print("#")
    print(f"# {'ratio of tok/s':<26s} {'median':>6s} {'best':>6s} {'target':>8s}  per round")
    by_round = {v: {r["round"]: float(r["tokens_per_s"]) for r in runs.get(v, [])} for v in VARIANTS}
    for num, den, target in RATIOS:
        name = f"{num} / {den}"
        tgt = f">= {target:.1f}x" if target else "-"
        if num not in medians or den not in medians:
            missing = " and ".join(v for v in (num, den) if v not in medians)
            print(f"  {name:<26s} {'n/a':>6s} {'n/a':>6s} {tgt:>8s}  ({missing} failed)")
            continue
        ratio = medians[num] / medians[den]
        best = max(by_round[num].values()) / max(by_round[den].values())
        paired = [by_round[num][r] / by_round[den][r] for r in sorted(by_round[num], key=int)
                  if r in by_round[den]]
        verdict = "" if not target else ("  meets" if ratio >= target else "  BELOW target")
        print(f"  {name:<26s} {ratio:5.2f}x {best:5.2f}x {tgt:>8s}  {' '.join(f'{p:.2f}' for p in paired)}{verdict}")
    print("#   verdict from the medians; other work on the cores only ever slows a run, so on a loaded machine "
          "the best (max / max) and the quiet rounds are the better guide")

    # A variant that never ran shows its failure in its row; here the failed rounds of the others.
    notes = [(v, rnd, note) for v in VARIANTS if v in runs for rnd, note in failures.get(v, [])]
    if notes:
        print("#")
        print("# failures (logs in runs/bench-cpu/logs/VARIANT-rROUND.log):")
        for v, rnd, note in notes:
            print(f"#   {v} round {rnd}: {note}")


if __name__ == "__main__":
    main()
