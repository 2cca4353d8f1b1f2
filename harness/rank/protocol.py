"""The zoo's protocol for one optimizer: its three phases as the zoo's own presets run them
(conf/experiment/zoo_tune, zoo_shortlist, zoo, or their zoo_decay_* twins), with the optimizer
axis replaced by the newcomer, each phase's folder under the ranked folder and each phase
reading the one before (`tune.source`).

Composing the presets, not copying them, keeps the protocol the zoo's: the same data splits,
seeds, phase lengths, each optimizer's own range around its default rate, budget, edge
re-search and selection rule. A combination's random trials are keyed by its overrides
(`harness.tuning.search`: model, optimizer and the preset's name, in the preset's order), so
the command below draws the trials the zoo drew for an optimizer of the field
(tests/test_rank.py checks Adam's against results/zoo_tune). Each phase also reuses
(`sweep.reuse`) what the field's own phase trained of the same configs: a field optimizer
copies its runs instead of training them.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from harness.config.identity import config_hash
from harness.errors import ConfigError
from harness.rank.settings import Request
from harness.zoo_phases import PHASES, TRAIN, Phase, composed

# rank.smoke: the pipeline on tiny subsets, a few iterations per phase (the protocol's shape:
# a short phase 1, then phases 2 and 3 at one longer length, as phase 3 takes its rates from
# phase 2 at its own length); its numbers compare with nothing.
SMOKE_DATA = [
    "data.train_size=1000",
    "data.val_size=500",
    "data.test_size=500",
    "train.eval_train_size=500",
]
SMOKE_PHASES = (
    ["train.iterations=30", "train.eval_every=10", "tune.budget=4", "tune.beyond_edge.rounds=1"],
    ["train.iterations=60", "train.eval_every=20"],
    ["train.iterations=60", "train.eval_every=20"],
)
SEEDS = (1, 2, 3)  # phase 3's (conf/zoo_phase/evaluate.yaml)


def phase_overrides(request: Request, out: Path, index: int) -> list[str]:
    """The overrides of phase `index` (0, 1, 2) for `request`, its folder under `out`: the
    zoo's preset, the nets where they are fewer than the field's, the request's overrides,
    then what only says where it runs (its folder, the phase it reads, the field's runs it
    reuses), which does not change what the trials are."""
    field, smoke = request.field, request.smoke
    nets = [] if request.nets == ["net1", "net2", "net3"] else [f"model={','.join(request.nets)}"]
    overrides = [f"experiment={field.presets[index]}", *nets, *request.overrides]
    if smoke:
        overrides += [*SMOKE_DATA, *SMOKE_PHASES[index]]
    overrides.append(f"hydra.sweep.dir={quoted(out / PHASES[index])}")
    if index:
        overrides.append(f"tune.source={quoted(out / PHASES[index - 1])}")
    if not smoke:  # a smoke run's tiny configs are never the field's
        overrides.append(f"sweep.reuse=[{quoted(field.folders[index])}]")
    return overrides


def quoted(path: Path) -> str:
    """A path as an override's value: quoted, since a ranked folder's name holds `=`
    (adam-amsgrad=true), which Hydra's grammar reads as a key's end."""
    return "'" + str(path).replace("\\", "\\\\").replace("'", "\\'") + "'"


def phases(request: Request, out: Path) -> list[Phase]:
    return [
        Phase(name, [*TRAIN, "-m", *phase_overrides(request, out, i)], out / name)
        for i, name in enumerate(PHASES)
    ]


def resolved(overrides: list[str]) -> dict:
    """The resolved config of a run of `harness-train <overrides>` as a dict (`composed`)."""
    return OmegaConf.to_container(composed(overrides))


def check_optimizer(request: Request) -> dict[str, bool]:
    """Compose the request's run once (an unknown optimizer, a key it does not have: one
    line) and say of each override whether it leaves its key at the default the optimizer's
    config already holds (what the ranked folder's name leaves out)."""
    given = resolved(["model=net1", *request.overrides])
    choice = [
        o
        for o in request.overrides
        if override_key_is(o, "optimizer") or override_key_is(o, "optimizer._target_")
    ]
    bare = resolved(["model=net1", *choice])
    at_default = {}
    for override in request.overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in ("optimizer", "optimizer._target_"):
            continue
        at_default[key] = OmegaConf.select(
            OmegaConf.create(bare), key, default=object
        ) == OmegaConf.select(OmegaConf.create(given), key, default=None)
    return at_default


def override_key_is(override: str, key: str) -> bool:
    return override.split("=", 1)[0].lstrip("+~") == key


def in_field(request: Request, net: str) -> dict[int, str] | None:
    """The field's phase-3 runs (seed -> config hash) of the request's configs on `net` where
    the field holds every seed: the configs its phase 3 would train, at the rate the field's
    own phase 2 chose for them; None where the field's phase 2 never trained this config
    (the request is a newcomer on that net)."""
    from harness.sweeps.resume import read_index

    field = request.field
    found = {}
    for seed in SEEDS:
        try:
            config = resolved(
                [
                    f"experiment={field.presets[2]}",
                    f"model={net}",
                    *request.overrides,
                    f"seed={seed}",
                    f"tune.source={field.folders[1]}",
                ]
            )
        except ConfigError as exc:
            if "no tuning run in" in str(exc):
                return None
            raise
        digest = config_hash(config)
        if digest not in read_index(field.evaluated):
            return None
        found[seed] = digest
    return found
