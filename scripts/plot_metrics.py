#!/usr/bin/python3
"""Plot one or more Loom runs for comparison: training and validation loss, tokens/s, and (when
a run scored log.choices) its multiple-choice acc_norm, against the step, from each run
directory's metrics.jsonl.

    scripts/plot_metrics.py RUN_DIR [RUN_DIR ...] [-o runs.png] [--smooth N]

Each run is labelled with its directory name. Skipped (non-finite) steps and missing values are
left out. Needs Debian's python3-matplotlib (installed by scripts/setup.sh).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed: writes a file
import matplotlib.pyplot as plt  # noqa: E402


def load(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        sys.exit(f"plot_metrics: {path} not found (is {run_dir} a Loom log.dir?)")
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_metrics: {path}:{n}: not JSON ({e})")
            if "resumed_at_step" in row:  # a session redoing steps: its rows replace the earlier ones
                rows = [r for r in rows if r["step"] < row["resumed_at_step"]]
            else:
                rows.append(row)
    return rows


def series(rows, key, drop_skipped=True):
    pts = [(r["step"] + 1, r[key]) for r in rows
           if r.get(key) is not None and not (drop_skipped and r.get("skipped"))]
    return [p[0] for p in pts], [p[1] for p in pts]


def smooth(ys, n):
    if n <= 1:
        return ys
    out, acc = [], []
    for y in ys:
        acc.append(y)
        if len(acc) > n:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories (log.dir)")
    ap.add_argument("-o", "--out", default="runs.png", help="output PNG (default runs.png)")
    ap.add_argument("--smooth", type=int, default=1, help="moving average over N logged points")
    a = ap.parse_args()
    data = [load(run) for run in a.runs]
    choices = any(series(rows, "choice_acc_norm", drop_skipped=False)[0] for rows in data)
    fig, axes = plt.subplots(3 if choices else 2, 1, figsize=(9, 11 if choices else 8), sharex=True)
    ax_loss, ax_tok = axes[0], axes[1]
    for run, rows in zip(a.runs, data):
        label = os.path.basename(os.path.normpath(run))
        x, y = series(rows, "loss")
        (line,) = ax_loss.plot(x, smooth(y, a.smooth), label=f"{label} train")
        vx, vy = series(rows, "val_loss", drop_skipped=False)  # evaluation is unaffected by a skip
        if vx:
            ax_loss.plot(vx, vy, "o--", color=line.get_color(), label=f"{label} val")
        tx, ty = series(rows, "tokens_per_s")
        ax_tok.plot(tx, smooth(ty, a.smooth), color=line.get_color(), label=label)
        if choices:  # log.choices (HellaSwag as llm.c plots it), at the evaluations
            cx, cy = series(rows, "choice_acc_norm", drop_skipped=False)
            if cx:
                axes[2].plot(cx, cy, "o-", color=line.get_color(), label=label)
    ax_loss.set_ylabel("loss (nats/token)")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    ax_tok.set_ylabel("tokens/s")
    ax_tok.grid(alpha=0.3)
    if choices:
        axes[2].set_ylabel("log.choices acc_norm")
        axes[2].legend()
        axes[2].grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(a.out, dpi=100)
    print(f"plot_metrics: wrote {a.out} ({len(a.runs)} run{'s' if len(a.runs) > 1 else ''})")


if __name__ == "__main__":
    main()
