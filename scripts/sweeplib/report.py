"""What a finished (or interrupted) sweep leaves for people: in SWEEP_DIR

  results.tsv       one row per trial: hyperparameters, steps run, best and final metric, status,
                    why it stopped (best trial first)
  curves.png        every trial's training loss against the step (smoothed) with the decision
                    metric's points, the stopping points marked x, PBT's checkpoint copies marked
                    with an arrow from the donor, the best trial drawn thick
  best_recipe.yaml  the best trial's full recipe (`loom config` of the recipe with the sweep's
                    and the trial's overrides), ready for `loom train best_recipe.yaml`
"""
import math
import os
import subprocess

from .controller import best_trial, metric_history

COLUMNS = ["trial", "params", "steps", "best", "final", "status", "why"]


def fmt(v):
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def results(trials, metric, mode):
    """Rows (dicts) best first: trials with a metric by their best value, the others after."""
    sign = 1 if mode == "min" else -1
    rows = []
    for t in trials:
        vals = [m for _, m in t["metrics"] if math.isfinite(m)]
        rows.append({"trial": t["id"], "params": " ".join(f"{k}={fmt(v)}" for k, v in sorted(t["params"].items())),
                     "steps": t["steps"], "best": (min if mode == "min" else max)(vals) if vals else None,
                     "final": t["metrics"][-1][1] if t["metrics"] else None, "status": t["status"],
                     "why": t.get("why", "")})
    rows.sort(key=lambda r: (r["best"] is None, sign * r["best"] if r["best"] is not None else 0, r["trial"]))
    return rows


def write_table(path, rows, metric):
    with open(path + ".tmp", "w") as f:
        f.write("\t".join(c if c not in ("best", "final") else f"{c}_{metric}" for c in COLUMNS) + "\n")
        for r in rows:
            f.write("\t".join("-" if r[c] is None else fmt(r[c]) for c in COLUMNS) + "\n")
    os.replace(path + ".tmp", path)


def print_table(rows, metric, out=print):
    out(f"{'trial':>5} {'steps':>6} {'best ' + metric:>14} {'status':<9} params / why stopped")
    for r in rows:
        best = "-" if r["best"] is None else f"{r['best']:.4f}"
        out(f"{r['trial']:>5} {r['steps']:>6} {best:>14} {r['status']:<9} {r['params']}"
            + (f"  ({r['why']})" if r["why"] else ""))


def smooth(ys, n=10):
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc = y if i == 0 else acc + (y - acc) / min(i + 1, n)
        out.append(acc)
    return out


def plot(path, out_dir, trials, metric, mode, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    best = best_trial(trials, mode)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for t in trials:
        run = os.path.join(out_dir, f"trial_{t['id']}", "run")
        loss = metric_history(run, "loss")
        if not loss:
            continue
        c = colors[t["id"] % len(colors)]
        thick = best is not None and t["id"] == best["id"]
        xs, ys = [s for s, _ in loss], smooth([v for _, v in loss])
        label = f"{t['id']}: " + " ".join(f"{k.split('.')[-1]}={fmt(v)}" for k, v in sorted(t["params"].items()))
        ax.plot(xs, ys, color=c, lw=2.4 if thick else 1.0, alpha=1.0 if thick else 0.75,
                label=label + (" (best)" if thick else ""))
        pts = metric_history(run, metric) if metric != "loss" else []
        if pts:
            ax.plot([s for s, _ in pts], [v for _, v in pts], "o", color=c, ms=3.5)
        if t["status"] in ("stopped", "failed"):
            ax.plot([xs[-1]], [ys[-1]], "x", color=c, ms=10, mew=2.5)
        for e in t.get("lineage", []):
            y = next((v for s, v in zip(xs, ys) if s >= e["step"]), ys[-1])
            ax.annotate("", xy=(e["step"], y), xytext=(e["step"] - max(1, xs[-1] // 40), y),
                        arrowprops={"arrowstyle": "->", "color": c, "lw": 1.5})
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss (smoothed); dots: {metric}")
    ax.set_title(title + "  (x: stopped early)")
    ax.grid(alpha=0.3)
    if len(trials) <= 16:
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path + ".tmp.png", dpi=110)
    plt.close(fig)
    os.replace(path + ".tmp.png", path)


def write_best_recipe(path, loom, spec, trial):
    """`loom config` of the recipe with the sweep's overrides, its max_steps (every trial trained on
    that schedule: the learning rate decays over train.steps) and the trial's hyperparameters."""
    argv = [loom, "config", spec["recipe"]]
    sets = list(spec.get("sets", [])) + [f"train.steps={spec['max_steps']}"]
    for s in sets + [f"{k}={v}" for k, v in sorted(trial["params"].items())]:
        argv += ["--set", s]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        return f"loom config failed ({r.returncode}): {r.stderr.strip()}"
    head = (f"# The best trial ({trial['id']}) of the sweep in {os.path.dirname(os.path.abspath(path))}:\n"
            f"# {spec['recipe']} with " + " ".join(argv[4::2]) + "\n"
            "# log.dir and checkpoint.dir are the recipe's, not the trial's: set them for the rerun.\n")
    with open(path + ".tmp", "w") as f:
        f.write(head + r.stdout)
    os.replace(path + ".tmp", path)
    return None


def write_all(out_dir, loom, spec, trials, log=print):
    rows = results(trials, spec["metric"], spec["mode"])
    write_table(os.path.join(out_dir, "results.tsv"), rows, spec["metric"])
    print_table(rows, spec["metric"], log)
    steps = sum(t["steps"] for t in trials)
    full = len(trials) * spec["max_steps"]
    log(f"sweep: {steps} steps trained in all, {100.0 * steps / full:.0f}% of the {full} that running every trial "
        f"to {spec['max_steps']} steps would take")
    kind = spec["scheduler"].get("kind", "asha")
    try:
        plot(os.path.join(out_dir, "curves.png"), out_dir, trials, spec["metric"], spec["mode"],
             f"{os.path.basename(os.path.abspath(out_dir))}: {kind}, {len(trials)} trials")
    except ImportError as e:
        log(f"sweep: no curves.png ({e}; scripts/setup.sh installs python3-matplotlib)")
    best = best_trial(trials, spec["mode"])
    if best is not None:
        err = write_best_recipe(os.path.join(out_dir, "best_recipe.yaml"), loom, spec, best)
        log(f"sweep: best trial {best['id']} {best['params']}: " +
            (f"no best_recipe.yaml: {err}" if err else f"rerun with `loom train {os.path.join(out_dir, 'best_recipe.yaml')}`"))
    return rows
