#!/usr/bin/env python3
"""The tables of scripts/bench_zero.sh: model-state memory per rank by ZeRO stage, and step time.

Two modes:
    bench_zero_table.py --record LOG_DIR     one run's figures, as tab-separated key=value fields
                                             (appended by bench_zero.sh to results.tsv)
    bench_zero_table.py RESULTS.TSV          the markdown tables

results.tsv holds one record per line of tab-separated key=value fields:
    load=start|end avg1=<1-minute load average> cores=<n>
    shape=<name> variant=<name> round=<r> status=ok params_m=<M> gemm_gflops=<x> step_ms=<ms> comm_wait_ms=<ms>
        steps_timed=<n> final_loss=<nats> rank=<r> params_mb=... grads_mb=... optimizer_mb=... optimizer_host_mb=...
        activations_mb=... comm_buffers_mb=... model_state_mb=... peak_rss_mb=...
    shape=<name> variant=<name> round=<r> status=fail note=<why>

Memory is run.json's memory_end of the rank with the most model state (the ranks differ by at
most a few elements of shard padding); it does not change between rounds. step_ms and
comm_wait_ms of a run are the medians over its steps after the first (rank 0's metrics.jsonl);
over the rounds the tables give min and median.
"""

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict

MEM_FIELDS = ("params_mb", "grads_mb", "optimizer_mb", "optimizer_host_mb", "activations_mb",
              "comm_buffers_mb", "model_state_mb", "peak_rss_mb")
# Variant names bench_zero.sh uses, in table order, and how the table names them.
VARIANTS = (("z0", "zero 0"), ("z1", "zero 1"), ("z2", "zero 2"), ("z3", "zero 3"),
            ("z3np", "zero 3, no prefetch"), ("z3off", "zero 3 + offload cpu"))
LABEL = dict(VARIANTS)
TIMED = ("z0", "z3", "z3np")
TARGET = 0.30  # issue 21: zero 3's model state per rank <= 30% of zero 0's


def record(log_dir):
    """One run's figures as key=value fields (stdout), from its run.json and metrics.jsonl."""
    fields = {}
    sess = json.load(open(os.path.join(log_dir, "run.json")))["sessions"][-1]
    mem = max(sess["memory_end"], key=lambda r: r["model_state_mb"])
    fields["rank"] = mem["rank"]
    for k in MEM_FIELDS:
        fields[k] = f"{mem[k]:.2f}"
    rows = []
    with open(os.path.join(log_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "step" in r and "step_ms" in r:
                rows.append(r)
    timed = [r for r in rows if r["step"] >= 1]  # the first step warms up (allocations, caches)
    if timed:
        fields["step_ms"] = f"{statistics.median(r['step_ms'] for r in timed):.1f}"
        fields["comm_wait_ms"] = f"{statistics.median(r['comm_wait_ms'] for r in timed):.1f}"
    fields["steps_timed"] = len(timed)
    if rows:
        fields["final_loss"] = rows[-1]["loss"]
    print("\t".join(f"{k}={v}" for k, v in fields.items()))


def read_records(path):
    records = []
    with open(path) as f:
        for line in f:
            fields = [kv.split("=", 1) for kv in line.rstrip("\n").split("\t") if "=" in kv]
            if fields:
                records.append(dict(fields))
    return records


def num(r, k):
    v = r.get(k)
    return None if v in (None, "") else float(v)


def f1(x):
    return "-" if x is None else f"{x:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?", help="results.tsv written by bench_zero.sh")
    ap.add_argument("--record", metavar="LOG_DIR", help="print one run's fields")
    ap.add_argument("--dp", type=int, default=4)
    ap.add_argument("--timed", default="", metavar="SHAPES", help="the shapes whose step time was measured (space-separated)")
    ap.add_argument("--describe", action="append", default=[], metavar="SHAPE=TEXT",
                    help="how the tables name a shape (repeatable)")
    args = ap.parse_args()
    if args.record:
        record(args.record)
        return
    if not args.results:
        ap.error("give RESULTS.TSV or --record LOG_DIR")
    describe = dict(d.split("=", 1) for d in args.describe)
    records = read_records(args.results)
    ok = defaultdict(list)       # (shape, variant) -> ok records
    failed = defaultdict(list)   # (shape, variant) -> (round, note)
    shapes = []
    for r in (r for r in records if "variant" in r):
        key = (r["shape"], r["variant"])
        if r["shape"] not in shapes:
            shapes.append(r["shape"])
        if r.get("status") == "ok":
            ok[key].append(r)
        else:
            failed[key].append((r.get("round", "?"), r.get("note", "failed")))

    load = {r["load"]: r for r in records if "load" in r}
    if load:
        cores = next(iter(load.values())).get("cores", "?")
        print("Load average (1 min) " + ", ".join(f"at {k} {r.get('avg1', '?')}" for k, r in load.items())
              + f" on {cores} cores.\n")

    # ---- memory ----
    print(f"Model state per rank at dp {args.dp} (MB = 10^6 bytes; run.json memory_end, the rank with the most; "
          "model state = params + grads + optimizer on the device, ZeRO-2/3's per-unit buffers at their peak)\n")
    print("| model | variant | params | grads | optimizer | optimizer (host) | model state | vs zero 0 | activations | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for shape in shapes:
        base = ok.get((shape, "z0"), [None])[0]
        base_ms = num(base, "model_state_mb") if base else None
        title = describe.get(shape, shape)
        params_m = next((r.get("params_m") for v, _ in VARIANTS for r in ok.get((shape, v), []) if r.get("params_m")),
                        None)
        if params_m:
            title += f", {params_m}M params"
        name = title  # the model named on its first row only
        for v, label in VARIANTS:
            runs = ok.get((shape, v))
            if not runs:
                if (shape, v) in failed:
                    print(f"| {name} | {label} | failed: {failed[(shape, v)][-1][1]} |||||||| ")
                    name = ""
                continue
            r = runs[0]
            ms = num(r, "model_state_mb")
            first, name = name, ""
            frac = f"{100 * ms / base_ms:.1f}%" if base_ms else "-"
            print(f"| {first} | {label} | {f1(num(r, 'params_mb'))} | {f1(num(r, 'grads_mb'))} | "
                  f"{f1(num(r, 'optimizer_mb'))} | {f1(num(r, 'optimizer_host_mb'))} | {f1(ms)} | {frac} | "
                  f"{f1(num(r, 'activations_mb'))} | {f1(num(r, 'peak_rss_mb'))} |")
        z3 = ok.get((shape, "z3"), [None])[0]
        if base and z3:
            frac = num(z3, "model_state_mb") / base_ms
            # The part above the 1/dp floor: ZeRO-3's gathered weights and per-unit gradient
            # buffers (the shards themselves are z0 / dp, up to padding).
            gathered = num(z3, "params_mb") - num(base, "params_mb") / args.dp
            grad_bufs = num(z3, "grads_mb") - num(base, "grads_mb") / args.dp
            verdicts.append(
                f"- {title}: zero 3 holds {100 * frac:.1f}% of zero 0's model state per rank "
                f"({'meets' if frac <= TARGET else 'misses'} the target of <= {100 * TARGET:.0f}%); the floor of "
                f"sharding everything over dp {args.dp} is {100 / args.dp:.0f}%, the rest is the gathered weights "
                f"(peak {gathered:.1f} MB) and per-unit gradient buffers (peak {grad_bufs:.1f} MB)")
        # Every stage trains the same model on the same batches: the last step's losses agree up to
        # summation order (all-reduce against reduce-scatter, ranks' partial sums).
        losses = [float(r["final_loss"]) for v, _ in VARIANTS for r in ok.get((shape, v), []) if r.get("final_loss")]
        if losses:
            lo, hi = min(losses), max(losses)
            verdicts.append(f"- {title}: final loss of all {len(losses)} runs {lo:.6f} to {hi:.6f} "
                            f"(relative spread {(hi - lo) / abs(lo):.1e})")
    print()
    print("\n".join(verdicts))

    # ---- step time ----
    timed_shapes = [s for s in shapes if s in args.timed.split()]
    for shape in timed_shapes:
        name = describe.get(shape, shape)
        rounds = max(len(ok.get((shape, v), [])) + len(failed.get((shape, v), [])) for v in TIMED)
        print(f"\nStep time, {name}: {rounds} rounds, the variants alternating; per run the median over its "
              "steps after the first (rank 0), then min and median over the rounds\n")
        print("| variant | runs | step ms min | step ms median | comm wait ms min | comm wait ms median | "
              "step vs zero 0 (median) | step ms per round | gemm GFLOP/s at start |")
        print("|---|---|---|---|---|---|---|---|---|")
        med = {}
        for v in TIMED:
            runs = ok.get((shape, v), [])
            if not runs:
                note = failed.get((shape, v), [("?", "not run")])[-1][1]
                print(f"| {LABEL[v]} | 0 | failed: {note} |||||||")
                continue
            steps = [num(r, "step_ms") for r in runs]
            waits = [num(r, "comm_wait_ms") for r in runs]
            med[v] = (statistics.median(steps), statistics.median(waits))
            rel = f"{med[v][0] / med['z0'][0]:.2f}x" if "z0" in med else "-"
            per_round = " ".join(f"{s:.0f}" for s in steps)
            nfail = len(failed.get((shape, v), []))
            gemm = [num(r, "gemm_gflops") for r in runs if num(r, "gemm_gflops")]
            gemm_range = f"{min(gemm):.0f}-{max(gemm):.0f}" if gemm else "-"
            print(f"| {LABEL[v]} | {len(runs)}{f' (+{nfail} failed)' if nfail else ''} | {min(steps):.0f} | "
                  f"{med[v][0]:.0f} | {min(waits):.0f} | {med[v][1]:.0f} | {rel} | {per_round} | {gemm_range} |")
        gemm = [num(r, "gemm_gflops") for v in TIMED for r in ok.get((shape, v), []) if num(r, "gemm_gflops")]
        if gemm and max(gemm) > 1.3 * min(gemm):
            print(f"\n- the runs had unequal shares of the CPU (gemm rate at start {min(gemm):.0f} to {max(gemm):.0f} "
                  "GFLOP/s): compare their step times with care, or run more rounds")
        if "z3" in med and "z3np" in med:
            (s_on, w_on), (s_off, w_off) = med["z3"], med["z3np"]
            hidden = w_off - w_on
            print(f"\n- prefetch: comm wait {w_off:.0f} -> {w_on:.0f} ms per step (median), "
                  f"{hidden:.0f} ms hidden = {100 * hidden / w_off if w_off > 0 else 0:.0f}% of the wait without it; "
                  f"step time {s_off:.0f} -> {s_on:.0f} ms ({s_off - s_on:+.0f} ms)")
        if "z0" in med and "z3" in med:
            print(f"- zero 3 (prefetch) vs zero 0: step time {med['z3'][0] / med['z0'][0]:.2f}x, comm wait "
                  f"{med['z3'][1]:.0f} vs {med['z0'][1]:.0f} ms per step")
    notes = [(s, v, rnd, note) for (s, v), fl in failed.items() for rnd, note in fl]
    if notes:
        print("\nFailures:")
        for s, v, rnd, note in notes:
            print(f"- {describe.get(s, s)} {LABEL.get(v, v)} round {rnd}: {note}")


if __name__ == "__main__":
    sys.exit(main())
