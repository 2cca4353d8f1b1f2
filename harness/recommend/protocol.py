"""The zoo's protocol on a user's problem: its three presets (conf/experiment/zoo_tune,
zoo_shortlist, zoo) composed with the user's model and data, the contenders as the optimizer
axis and the user's lengths, each phase a `harness-train -m` process into its own folder under
the answer's, each reading the one before (`tune.source`). Composing the presets, not copying
them, keeps the protocol the zoo's: each contender's own range around its default rate, the
edge re-search, the shortlist of 3 at the full length, the selection rule on validation, seeds
1-3. A phase that finished is skipped run by run when the command runs again (the sweeps'
resume), so a stopped answer goes on where it stopped."""

from __future__ import annotations

from pathlib import Path

from harness.recommend.settings import Request
from harness.zoo_phases import PHASES, TRAIN, Phase

PRESETS = ("zoo_tune", "zoo_shortlist", "zoo")
SHORTLIST, SEEDS = 3, 3  # conf/zoo_phase/shortlist.yaml's budget, evaluate.yaml's seeds
EDGE_TRIALS = 2 * 5  # tune.beyond_edge: up to 2 rounds of 5 more trials
# smoke: tiny subsets and a few iterations (the protocol's shape; its numbers mean nothing)
SMOKE_DATA = [
    "data.train_size=500",
    "data.val_size=200",
    "data.test_size=200",
    "train.eval_train_size=200",
]
SMOKE_LENGTHS = {"trial_iterations": 20, "iterations": 40, "budget": 3}


def lengths(request: Request) -> dict:
    """trial_iterations, iterations, budget: the request's, or the smoke mode's."""
    own = dict(request.own)
    if request.smoke:
        own |= {k: v for k, v in SMOKE_LENGTHS.items() if k not in request.given}
    return {k: own[k] for k in ("trial_iterations", "iterations", "budget")}


def eval_every(iterations: int, preset: int) -> int:
    """The preset's evaluation interval where the run is long enough for 4 evaluations, else a
    quarter of the run (a multiple of train.log_every, 10)."""
    if iterations >= 4 * preset:
        return preset
    return max(10, iterations // 40 * 10)


def phase_overrides(request: Request, contenders: list[str], index: int) -> list[str]:
    """The overrides of phase `index` (0, 1, 2): the zoo's preset, the model (the presets sweep
    net1-net3: a model is always named), the contenders, the lengths, the user's overrides,
    then the folders."""
    n = lengths(request)
    steps = n["trial_iterations"] if index == 0 else n["iterations"]
    preset_every = (500, 1000, 500)[index]
    model = [] if request.choice("model") else ["model=net2"]
    overrides = [
        f"experiment={PRESETS[index]}",
        *model,
        f"optimizer={','.join(contenders)}",
        *request.overrides,
        f"train.iterations={steps}",
        f"train.eval_every={eval_every(steps, preset_every)}",
    ]
    if index == 0:
        overrides.append(f"tune.budget={n['budget']}")
    if request.smoke:
        overrides += [*SMOKE_DATA, "tune.beyond_edge.rounds=1"] if index == 0 else SMOKE_DATA
    folder = request.folder
    overrides.append(f"hydra.sweep.dir={quoted(folder / PHASES[index])}")
    if index:
        overrides.append(f"tune.source={quoted(folder / PHASES[index - 1])}")
    return overrides


def quoted(path: Path) -> str:
    return "'" + str(path).replace("\\", "\\\\").replace("'", "\\'") + "'"


def phases(request: Request, contenders: list[str]) -> list[Phase]:
    return [
        Phase(name, [*TRAIN, "-m", *phase_overrides(request, contenders, i)], request.folder / name)
        for i, name in enumerate(PHASES)
    ]
