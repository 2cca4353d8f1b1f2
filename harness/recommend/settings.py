"""What one `harness-recommend` command asks: its own keys (conf/recommend.yaml: name,
contenders, K, lengths, budget, smoke), the contenders (the course's nine, Schedule-Free AdamW
and the committed zoo's best K), and the overrides that go to the zoo's phases untouched (the
user's model and data)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from harness.errors import ConfigError
from harness.zoo_phases import key_value

REPO = Path(__file__).resolve().parents[2]
CONF_DIR = REPO / "conf"
OWN_FILE = CONF_DIR / "recommend.yaml"
ZOO = REPO / "results" / "zoo"  # the committed zoo's phase 3: what the best K are read from
COURSE = (
    "sgd",
    "momentum",
    "nesterov",
    "adagrad",
    "adadelta",
    "rmsprop",
    "adam",
    "adamax",
    "nadam",
)
SCHEDULE_FREE = "schedulefree_adamw"
# rec.smoke: the contenders when none are given (one of the SGD family, of Adam's, Schedule-Free)
SMOKE_CONTENDERS = ("sgd", "adam", SCHEDULE_FREE)


@dataclass
class Request:
    """A parsed `harness-recommend` command line."""

    overrides: list[str]  # to every phase, untouched: the model, the data, train.* settings
    own: dict = field(default_factory=dict)  # conf/recommend.yaml's keys, as given
    given: set = field(default_factory=set)  # the own keys the command line set

    @property
    def smoke(self) -> bool:
        return bool(self.own["smoke"])

    def choice(self, group: str) -> str | None:
        """The option of config group `group` the overrides choose (None: the default)."""
        found = [o.split("=", 1)[1] for o in self.overrides if o.split("=", 1)[0] == group]
        return found[-1] if found else None

    @property
    def name(self) -> str:
        """The answer's folder name: `name`, else the model and data chosen."""
        if self.own["name"]:
            return str(self.own["name"])
        model = self.choice("model") or "net2"
        if model == "module":
            model = self.target("model").rsplit(".", 1)[-1]
        data = self.choice("data") or "mnist"
        if data == "torchvision":
            data = self.value("data.name") or "FashionMNIST"
        elif data == "arrays":
            data = Path(self.value("data.path") or "arrays").stem
        name = f"{model}_{data}" + ("_smoke" if self.smoke else "")
        return re.sub(r"[^A-Za-z0-9_.-]", "_", name)

    def value(self, key: str) -> str | None:
        found = [o.split("=", 1)[1] for o in self.overrides if o.split("=", 1)[0] == key]
        return found[-1] if found else None

    def target(self, group: str) -> str:
        return self.value(f"{group}._target_") or ""

    @property
    def folder(self) -> Path:
        return Path(self.own["root"]) / self.name


def parse(argv: list[str]) -> Request:
    """The request of `argv` (Hydra overrides; the command's own keys bare or as recommend.X);
    ConfigError (one line) for a flag, an unknown recommend.* key or a bad value. A model given
    by its class alone (`model._target_=my_pkg.Net`) starts from `model=module`, so that no key
    of the default net reaches its constructor."""
    own = OmegaConf.to_container(OmegaConf.load(OWN_FILE))
    overrides, given = [], set()
    for arg in argv:
        key, value = key_value(
            arg,
            "harness-recommend",
            "model=lenet, data=arrays data.path=mine.npz, contenders=[sgd,adam], K=5, "
            "recommend.smoke=true",
        )
        bare = key.removeprefix("recommend.")
        if bare in own:
            own[bare] = yaml.safe_load(value) if value else None
            given.add(bare)
        elif key.startswith("recommend."):
            raise ConfigError(f"{key}: unknown; harness-recommend's keys: {', '.join(own)}")
        else:
            overrides.append(arg)
    if any(o.startswith("model._target_=") for o in overrides) and not any(
        o.startswith("model=") for o in overrides
    ):
        overrides.insert(0, "model=module")
    request = Request(overrides, own, given)
    _check(request)
    return request


def _check(request: Request) -> None:
    own = request.own
    for key in ("K", "budget", "iterations", "trial_iterations"):
        value = own[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < (key != "K"):
            raise ConfigError(f"{key} must be a whole number >= {int(key != 'K')}, got {value!r}")
    contenders = own["contenders"]
    if contenders is not None and (
        not isinstance(contenders, list) or not contenders or not all(contenders)
    ):
        raise ConfigError(f"contenders must be a list of optimizer names, got {contenders!r}")
    if not isinstance(own["smoke"], bool):
        raise ConfigError(f"recommend.smoke must be true or false, got {own['smoke']!r}")


def zoo_best(k: int, exclude: tuple[str, ...] = (), zoo: Path = ZOO) -> list[str]:
    """The committed zoo's best `k` optimizers by its verdict's measure, validation only: each
    net's optimizers ranked by mean final validation accuracy of phase 3's seeds (a diverged or
    failed seed ranks last), the ranks averaged over net1-net3, the `k` best of those not in
    `exclude` (ties by name)."""
    if k == 0:
        return []
    from harness.results import load_runs

    runs = load_runs(zoo)
    runs = runs.assign(
        value=runs["final_val_accuracy"].where(runs["status"] == "completed", float("-inf"))
    )
    means = runs.groupby(["model", "optimizer"], observed=True)["value"].mean().unstack(0)
    ranks = means.rank(ascending=False).mean(axis=1)
    ranks = ranks.drop([o for o in exclude if o in ranks.index])
    return sorted(ranks.index, key=lambda o: (ranks[o], o))[:k]


def contenders(request: Request) -> tuple[list[str], str]:
    """The contenders and the rule that chose them (for the answer's README)."""
    given = request.own["contenders"]
    if given is not None:
        return [str(c) for c in given], "given on the command line (`contenders=[...]`)"
    if request.smoke:
        return list(SMOKE_CONTENDERS), "the smoke mode's three (SGD, Adam, Schedule-Free AdamW)"
    k = request.own["K"]
    base = [*COURSE, SCHEDULE_FREE]
    best = zoo_best(k, tuple(base))
    rule = (
        f"the course's nine, Schedule-Free AdamW and the committed zoo's best K = {k} "
        "(results/zoo, phase 3: each net's optimizers ranked by mean final validation accuracy "
        "over seeds 1-3, a diverged seed last; ranks averaged over net1-net3; the K best not "
        f"already named): {', '.join(best)}"
    )
    return base + best, rule
