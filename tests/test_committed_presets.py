"""A committed study reproduces from its preset: the runs its folder in results/ holds are jobs
(by `config_hash`) of the commands its write-up documents, composed today, so each command, run
into a copy of the folder, finds them finished and trains none of them again.

A default that changed after a study ran (`data.val_size`: no hold-out before validation existed)
is pinned in the study's preset to what its runs were trained with; a drift that is not fails
here and names the keys that moved. tests/test_moved_targets.py checks the other half: a committed
run's recorded config still hashes to its recorded `config_hash`."""

import copy
import importlib.util
import json
import math
import shlex
import subprocess
from dataclasses import dataclass, field

import pandas as pd
import pytest
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from conftest import REPO, compose_config, hydra_context
from harness.config.identity import computes, config_hash, identity_config
from harness.storage import read_runs
from harness.sweeps.compose import SweepComposer
from harness.sweeps.jobs import TUNING_SWEEPER, TuningPlan, sweep_jobs
from harness.tuning.search import beyond_edge

RESULTS = REPO / "results"
PLAIN_SGD = "optimizer.momentum=0 optimizer.nesterov=false optimizer.lr=0.01,0.03,0.1,0.3,1"
# Each committed study of a preset: {its folder in results/: the `harness-train -m` commands that
# trained it, as its write-up gives them}. Not here: tune_tpe (Optuna draws its trials as it
# goes: its own test below), and folders whose preset is gone or was changed on purpose, each
# said so in its write-up (course_stacked, course_yellowfin_2017, zoo_wide*).
COMMANDS = {
    "lr_grid": ["experiment=lr_grid seed=0"],  # README.md: committed, seed 0
    "momentum": [  # results/momentum/README.md: net2, plain SGD, and both again on net3
        "experiment=momentum",
        f"experiment=momentum sweep.append=true {PLAIN_SGD}",
        "experiment=momentum model=net3 sweep.append=true",
        f"experiment=momentum model=net3 sweep.append=true {PLAIN_SGD}",
    ],
    "batch_size": ["experiment=batch_size"],
    "depth": ["experiment=depth"],
    "embeddings": [  # results/embeddings/README.md: the study and its appended NCF sweep
        "experiment=embeddings",
        "experiment=embeddings model=ncf data.num_users=100000 sweep.append=true",
    ],
    "embeddings_device/cuda": ["experiment=embeddings device=cuda problem.table_device=same,cpu"],
    "embeddings_device/cpu": ["experiment=embeddings device=cpu threads=16"],
    "course_test_selected": ["experiment=course_test_selected"],
    "course_tune": ["experiment=course_tune"],
    "course": ["experiment=course"],
    "zoo_tune": ["experiment=zoo_tune"],
    "zoo_shortlist": ["experiment=zoo_shortlist"],
    "zoo": ["experiment=zoo"],
}
DECAYED_ZOO = ("zoo_decay_tune", "zoo_decay_shortlist", "zoo_decay")


def decay_commands(experiment: str) -> list[str]:
    """A phase of the decayed zoo: one command per net over that net's optimizers, as
    experiments/zoo_decay_members.py wrote them into results/zoo/decay_members.md."""
    lines = (RESULTS / "zoo" / "decay_members.md").read_text().splitlines()
    prefix = f"harness-train -m experiment={experiment} "
    commands = [line.removeprefix("harness-train -m ") for line in lines if line.startswith(prefix)]
    assert len(commands) == 3, f"{experiment}: one command per net"
    return commands


COMMANDS |= {phase: decay_commands(phase) for phase in DECAYED_ZOO}


def search_commands(phase: str) -> list[str]:
    """A phase of the richer search: one command per net over that net's members, as
    experiments/zoo_search_members.py runs them."""
    spec = importlib.util.spec_from_file_location(
        "zoo_search_members", REPO / "experiments" / "zoo_search_members.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lists = module.members()
    return [shlex.join(module.command(phase, net, lists[net])[2:]) for net in module.NETS]


# the richer search's phases committed so far (its phase 1 grows net by net)
SEARCH_ZOO = tuple(p for p in ("zoo_search_tune",) if (RESULTS / p / "sweep.json").exists())
COMMANDS |= {phase: search_commands(phase) for phase in SEARCH_ZOO}
# The zoo's studies are checked on this many optimizers per command, spread over its list (with
# the rounds beyond an edge of those that had them): composing a job's config-group choices
# costs Hydra ~0.4 s, and every optimizer of every zoo phase (~1,500 choices) 13-19 min on this
# project's 2-core machines. None: every optimizer.
ZOO_SAMPLE: int | None = 5
SAMPLED = {"zoo_tune", "zoo_shortlist", "zoo", *DECAYED_ZOO, *SEARCH_ZOO}

# Committed runs that no command composes today for a change in the code, which a preset cannot
# pin: {study: the runs it concerns}.
NOT_FROM_ITS_PRESET = {
    # Its trials' rates were drawn while a tuning study's random stream still held the command's
    # execution keys (it ran with data.root=/work/shared/data/mnist; since e226fed the draws are
    # keyed by what computes only): every rate drawn today is another. YellowFin draws none.
    "course_tune": lambda runs: runs["optimizer"] != "yellowfin",
    # YellowFin's runs ran its first version before its config named a `variant` (and the five
    # settings that tell the variants apart): results/course_yellowfin_2017/README.md.
    "course_test_selected": lambda runs: runs["optimizer"] == "yellowfin",
}


@dataclass
class Composed:
    configs: dict[str, dict] = field(default_factory=dict)  # config_hash: resolved config
    choices: set[tuple[str, str]] = field(default_factory=set)  # (model, optimizer) composed
    beyond: set[str] = field(default_factory=set)  # config_hash of rounds beyond an edge


def _task(config: DictConfig) -> dict:
    """A job's config as its run records it: without Hydra's node, interpolations resolved."""
    return {
        key: OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        for key, value in config.items()
        if key != "hydra"
    }


def _lr(job: list[str]) -> float | None:
    found = [o.split("=", 1)[1] for o in job if o.startswith("optimizer.lr=")]
    return float(found[0]) if found else None


def beyond_the_edges(plan: TuningPlan, wanted: set[float]) -> list[list[str]]:
    """The jobs that the rounds beyond an edge may add to a tuning study (each round at either
    edge: which ones its results asked for is known once they are trained), of those whose
    learning rate is in `wanted` (no other can be a committed run)."""
    edge = plan.tune.get("beyond_edge")

    def rounds(combination, left: int) -> list[list[str]]:
        found = []
        for side in ("low", "high") if left and combination.region else ():
            widened = copy.copy(combination)  # beyond_edge widens its range
            trials = widened.jobs(beyond_edge(widened, side, plan.tune))
            found += [job for job in trials if _lr(job) in wanted] + rounds(widened, left - 1)
        return found

    return [job for c in plan.combinations for job in rounds(c, edge["rounds"] if edge else 0)]


def _sampled(master: DictConfig, sample: int) -> list[str]:
    """`sample` optimizers spread over the sweep's optimizer axis, as a command-line axis."""
    names = [n.strip() for n in str(master.hydra.sweeper.params.optimizer).split(",")]
    return [f"optimizer={','.join(names[:: math.ceil(len(names) / sample)])}"]


def composed_jobs(command: str, wanted_lrs: set[float], sample: int | None = None) -> Composed:
    """Every job `harness-train -m <command>` composes today, as the stacked launcher composes
    them (`SweepComposer`); with `sample`, of that many of its optimizers (a combination's jobs
    are the same whatever else the sweep holds)."""
    loader = GlobalHydra.instance().config_loader()
    overrides = shlex.split(command)
    master = loader.load_configuration("config", overrides, RunMode.MULTIRUN)
    if sample:
        overrides += _sampled(master, sample)
        master = loader.load_configuration("config", overrides, RunMode.MULTIRUN)
    composer = SweepComposer(loader, master)
    last = None

    def compose(job: list[str]) -> DictConfig:
        nonlocal last
        config = composer.compose(job)
        if config is not last:  # `${hydra:runtime.choices...}` reads the job's choices
            HydraConfig.instance().set_config(config)
            last = config
        return config

    beyond = []
    if master.hydra.sweeper.get("_target_") == TUNING_SWEEPER:
        plan = TuningPlan(master, compose)
        jobs, beyond = plan.jobs, beyond_the_edges(plan, wanted_lrs)
    else:
        jobs = sweep_jobs(master)
    found = Composed()
    for number, job in enumerate([*jobs, *beyond]):
        config = compose(job)
        choices = config.hydra.runtime.choices
        found.choices.add((choices.model, choices.optimizer))
        digest = config_hash(task := _task(config))
        found.configs[digest] = task
        if number >= len(jobs):
            found.beyond.add(digest)
    return found


ABSENT = "absent"


def drift(recorded: pd.Series, composed: dict[str, dict]) -> str:
    """The keys in which a committed run differs from the composed job nearest it."""
    mine = json.loads(recorded["config"]) | {"seed": recorded["seed"]}
    nearest, keys, nodes = {}, None, set()
    for task in composed.values():
        theirs = identity_config(task) | {"seed": task["seed"]}
        differ = [
            k
            for k in sorted({*mine, *theirs})
            if str(mine.get(k, ABSENT)) != str(theirs.get(k, ABSENT))
        ]
        if keys is None or len(differ) < len(keys):
            nearest, keys, nodes = theirs, differ, {k for k in task if computes(k)}
    if not keys:  # a node without keys (`logger: {}`) has no place in the identity
        roots = {k.split(".")[0] for k in mine}
        return f"no key; a node {sorted(nodes ^ roots)} is in one config only"
    return "; ".join(
        f"{k}: committed {mine.get(k, ABSENT)}, composed {nearest.get(k, ABSENT)}" for k in keys
    )


def test_every_committed_study_of_a_preset_is_checked():
    # git's index says what is committed: a study folder may be a local sweep in progress
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--", "results"], cwd=REPO, capture_output=True, text=True
        )
    except OSError:
        pytest.skip("no git to say which studies are committed")
    if listed.returncode:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    committed = {
        p.removeprefix("results/").removesuffix("/sweep.json")
        for p in listed.stdout.splitlines()
        if p.endswith("/sweep.json")
    }
    presets = {p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml")}
    assert set(COMMANDS) | {"tune_tpe"} <= committed
    assert committed & presets <= set(COMMANDS) | {"tune_tpe"}  # tune_tpe: its own test below


@pytest.mark.slow
@pytest.mark.parametrize("study", list(COMMANDS))
def test_a_committed_study_reproduces_from_its_preset(study: str, monkeypatch):
    monkeypatch.chdir(REPO)  # as its commands ran: tune.source (results/...) is relative
    columns = ["model", "optimizer", "lr", "seed", "config", "config_hash"]
    runs = read_runs(RESULTS / study, columns=columns)
    sample = ZOO_SAMPLE if study in SAMPLED else None
    composed = Composed()
    with hydra_context():
        for command in COMMANDS[study]:
            found = composed_jobs(command, set(runs["lr"].dropna()), sample)
            composed.configs |= found.configs
            composed.choices |= found.choices
            composed.beyond |= found.beyond
    of_jobs = pd.Series(list(zip(runs["model"], runs["optimizer"], strict=True))).isin(
        composed.choices
    )
    assert of_jobs.all() or sample, "a committed run of a net and optimizer no command composes"
    runs = runs[of_jobs.to_numpy()]
    missing = runs[~runs["config_hash"].isin(composed.configs)]
    excused = runs[NOT_FROM_ITS_PRESET[study](runs)] if study in NOT_FROM_ITS_PRESET else runs[:0]
    assert excused.empty or excused.index.equals(missing.index), "not the runs excused above"
    missing = missing.drop(excused.index)
    assert missing.empty, (
        f"{len(missing)} of the {len(runs)} committed runs of results/{study} are not among the "
        f"{len(composed.configs)} jobs its commands compose today "
        f"({' | '.join(COMMANDS[study])}); e.g. {drift(missing.iloc[0], composed.configs)}"
    )
    # the rounds beyond an edge are checked where the study had them
    if study in ("zoo_tune", "zoo_decay_tune"):
        assert runs["config_hash"].isin(composed.beyond).any()


@pytest.mark.slow
def test_the_committed_tpe_study_reproduces_from_its_preset():
    """Optuna's TPE asks for its trials as it goes: each committed trial's config is the
    preset's with the rate that trial drew."""
    runs = read_runs(RESULTS / "tune_tpe", columns=["config_hash", "lr"])
    assert len(runs) == 10
    with hydra_context():
        config = compose_config(["experiment=tune_tpe", "model=net2", "optimizer=adam"])
    for recorded, lr in runs.itertuples(index=False):
        config.optimizer.lr = float(lr)
        assert config_hash(OmegaConf.to_container(config, resolve=True)) == recorded, lr


def test_a_study_that_drifted_is_found_and_its_drift_named(monkeypatch):
    """The check above fails on a command that composes another hold-out than its runs had."""
    monkeypatch.chdir(REPO)
    runs = read_runs(RESULTS / "depth", columns=["config", "config_hash", "seed"])
    with hydra_context():
        composed = composed_jobs("experiment=depth data.val_size=5000 model.hidden=[100]", set())
    assert not runs["config_hash"].isin(composed.configs).any()
    assert drift(runs.iloc[0], composed.configs).startswith("data.val_size: committed absent")
