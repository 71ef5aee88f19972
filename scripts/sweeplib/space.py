"""Search spaces, written in YAML next to the recipe (docs/sweeps.md):

    space:
      optim.lr: {loguniform: [1.0e-4, 3.0e-2]}
      optim.weight_decay: {uniform: [0.0, 0.2]}
      train.micro_batch: {choice: [4, 8]}
      model.n_layer: {int: [2, 6]}          # inclusive
      optim.beta2: {grid: [0.95, 0.99]}     # every value, crossed with the samples
      train.seed: {seeds: 3}                # 3 seeds per configuration (1, 2, 3)
    samples: 8                              # random configurations per grid point
    seed: 0                                 # the sweep's own seed: the same trials every time

expand() turns it into the list of trials (dicts of recipe key -> value), in a fixed order that
depends only on the space and its seed. Keys must be `section.key`; values are checked here,
naming the key, before anything runs.
"""
import itertools
import math
import random

KINDS = ("grid", "choice", "uniform", "loguniform", "int", "seeds")


class SpaceError(ValueError):
    pass


def _check(key, spec):
    if "." not in key:
        raise SpaceError(f"space key '{key}': expected section.key (a recipe key)")
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in KINDS:
        raise SpaceError(f"space.{key}: expected one of {{{', '.join(KINDS)}: ...}}, got {spec!r}")
    kind, arg = next(iter(spec.items()))
    if kind in ("grid", "choice"):
        if not isinstance(arg, list) or not arg:
            raise SpaceError(f"space.{key}.{kind}: expected a non-empty list, got {arg!r}")
    elif kind == "seeds":
        if not isinstance(arg, int) or arg < 1:
            raise SpaceError(f"space.{key}.seeds: expected a count >= 1, got {arg!r}")
    else:
        if not (isinstance(arg, list) and len(arg) == 2 and all(isinstance(v, (int, float)) for v in arg)):
            raise SpaceError(f"space.{key}.{kind}: expected [low, high], got {arg!r}")
        lo, hi = arg
        if not lo <= hi:
            raise SpaceError(f"space.{key}.{kind}: low {lo} is above high {hi}")
        if kind == "loguniform" and lo <= 0:
            raise SpaceError(f"space.{key}.loguniform: the bounds must be > 0, got {arg!r}")
        if kind == "int" and not (float(lo).is_integer() and float(hi).is_integer()):
            raise SpaceError(f"space.{key}.int: expected integer bounds, got {arg!r}")
    return kind, arg


def expand(space, samples=1, seed=0):
    """The trials: the grid (and seeds) crossed with `samples` random draws of the rest."""
    if not isinstance(space, dict) or not space:
        raise SpaceError("space: expected a mapping of recipe keys to distributions")
    if not isinstance(samples, int) or samples < 1:
        raise SpaceError(f"samples: expected a count >= 1, got {samples!r}")
    grid, rand, seeds = [], [], []
    for key in sorted(space):
        kind, arg = _check(key, space[key])
        if kind == "grid":
            grid.append((key, arg))
        elif kind == "seeds":
            seeds.append((key, list(range(1, arg + 1))))
        else:
            rand.append((key, kind, arg))
    rng = random.Random(seed)
    draws = []
    for _ in range(samples if rand else 1):
        d = {}
        for key, kind, arg in rand:
            if kind == "choice":
                d[key] = arg[rng.randrange(len(arg))]
            elif kind == "uniform":
                d[key] = rng.uniform(arg[0], arg[1])
            elif kind == "loguniform":
                d[key] = math.exp(rng.uniform(math.log(arg[0]), math.log(arg[1])))
            else:
                d[key] = rng.randint(int(arg[0]), int(arg[1]))
        draws.append(d)
    trials = []
    fixed = grid + seeds
    for combo in itertools.product(*[values for _, values in fixed]) if fixed else [()]:
        for d in draws:
            t = dict(zip([k for k, _ in fixed], combo))
            t.update(d)
            trials.append(t)
    return trials
