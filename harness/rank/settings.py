"""What one `harness-rank` command asks: its own `rank.*` settings (conf/rank.yaml), the nets and
the field (the constant-rate zoo or the decayed one) it ranks against, and the overrides that go
to the zoo's phases untouched."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from harness.config.identity import executes, override_key
from harness.errors import ConfigError
from harness.zoo_phases import key_value

REPO = Path(__file__).resolve().parents[2]
CONF_DIR = REPO / "conf"
RANK_FILE = CONF_DIR / "rank.yaml"
NETS = ("net1", "net2", "net3")


@dataclass(frozen=True)
class Field:
    """One of the zoo's studies: its three presets and their folders (phase 1, 2, 3)."""

    schedule: str
    presets: tuple[str, str, str]
    folders: tuple[Path, Path, Path]

    @property
    def evaluated(self) -> Path:
        return self.folders[2]


FIELDS = {
    "constant": Field(
        "constant",
        ("zoo_tune", "zoo_shortlist", "zoo"),
        tuple(REPO / "results" / f for f in ("zoo_tune", "zoo_shortlist", "zoo")),
    ),
    "warmup_cosine": Field(
        "warmup_cosine",
        ("zoo_decay_tune", "zoo_decay_shortlist", "zoo_decay"),
        tuple(REPO / "results" / f for f in ("zoo_decay_tune", "zoo_decay_shortlist", "zoo_decay")),
    ),
}
# the field whose phase-1 runs the canaries train again: every schedule trains the same nets
CANARY_FIELD = FIELDS["constant"]


@dataclass
class Request:
    """A parsed `harness-rank` command line."""

    overrides: list[str]  # to every phase, untouched (the optimizer, its settings, data.root, ...)
    nets: list[str]
    field: Field
    rank: dict = field(default_factory=dict)

    @property
    def smoke(self) -> bool:
        return bool(self.rank["smoke"])

    def optimizer_overrides(self) -> list[str]:
        return [o for o in self.overrides if override_key(o).split(".")[0] == "optimizer"]


def parse(argv: list[str]) -> Request:
    """The request of `argv` (Hydra overrides); ConfigError (one line) for what cannot be
    ranked: a multirun flag, a net outside the field, a schedule the zoo has no field for, an
    unknown rank.* key."""
    rank = OmegaConf.load(RANK_FILE)
    own, overrides, nets, schedule = [], [], list(NETS), "constant"
    for arg in argv:
        key, value = key_value(
            arg,
            "harness-rank",
            "optimizer=lion, optimizer.lr=1e-3, model=net2, schedule=warmup_cosine, "
            "rank.smoke=true",
        )
        if key.startswith("rank."):
            if key.removeprefix("rank.") not in rank:
                raise ConfigError(f"no setting {key}; rank settings: {', '.join(rank)}")
            own.append(arg)
        elif key == "model":
            nets = [n.strip() for n in value.split(",") if n.strip()]
        elif key == "schedule":
            schedule = value
        else:
            overrides.append(arg)
    rank = OmegaConf.merge(rank, OmegaConf.from_dotlist([o.removeprefix("rank.") for o in own]))
    if schedule not in FIELDS:
        raise ConfigError(
            f"schedule={schedule}: the zoo's field is trained with {' or '.join(FIELDS)} "
            "(results/zoo, results/zoo_decay); no field to rank against"
        )
    outside = [n for n in nets if n not in NETS]
    if outside or not nets:
        raise ConfigError(
            f"model={','.join(outside) or '(none)'}: not a net of the field; the zoo's field "
            f"holds {', '.join(NETS)}"
        )
    return Request(overrides, nets, FIELDS[schedule], OmegaConf.to_container(rank))


def name_of(request: Request, defaults: dict[str, object] | None = None) -> str:
    """The ranked folder's name: rank.name, else the optimizer choice (or its class's name)
    and each override that changes what runs compute, less those at their default value
    (`defaults`: {key: whether the override's value is the default}): `adam-amsgrad=true`."""
    if request.rank.get("name"):
        return _safe(str(request.rank["name"]))
    given = dict(o.split("=", 1) for o in request.overrides)
    if "optimizer" in given:
        parts = [given.pop("optimizer")]
    elif "optimizer._target_" in given:
        parts = [given.pop("optimizer._target_").rsplit(".", 1)[-1].lower()]
    else:
        parts = ["adam"]  # the config's default optimizer
    for key, value in given.items():
        key = key.lstrip("+~")
        if executes(key) or (defaults or {}).get(key):
            continue
        parts.append(f"{key.removeprefix('optimizer.')}={value}")
    return _safe("-".join(parts))


def _safe(text: str) -> str:
    """A folder name: what a file system or a shell might misread becomes `_`."""
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", text)
