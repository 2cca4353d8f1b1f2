"""The richer search's optimizers, per net, and its phases' commands: the decayed study's members
(experiments/zoo_decay_members.py's rule: the course's nine, the Schedule-Free family and the
constant-rate zoo's 15 best per net by validation accuracy), the same list, so that the two
studies and the constant-rate zoo compare the same optimizers.

    python experiments/zoo_search_members.py                      # the commands, per net
    python experiments/zoo_search_members.py --spaces               # each member's search space
    python experiments/zoo_search_members.py --run zoo_search_tune  # phase 1, net by net

The members are read from results/zoo/decay_members.md (written by zoo_decay_members.py from
results/zoo). `--run PHASE` runs that phase's three commands one after the other (each resumes
where it stopped: finished runs are skipped), as a background job would:

    nohup python experiments/zoo_search_members.py --run zoo_search_tune \
        > /tmp/zoo_search_tune.log 2>&1 &
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from harness.errors import ConfigError, HarnessError
from harness.markdown import markdown_table
from harness.optimizers.catalogue import config_of
from harness.tuning.dimensions import Dimension

ROOT = Path(__file__).resolve().parents[1]
MEMBERS = ROOT / "results" / "zoo" / "decay_members.md"
PHASES = ("zoo_search_tune", "zoo_search_shortlist", "zoo_search")
NETS = ("net1", "net2", "net3")


def members(path: Path = MEMBERS) -> dict[str, list[str]]:
    """Per net, the decayed study's optimizers, as its phase-1 command lists them."""
    if not path.is_file():
        raise ConfigError(f"{path} is missing: run experiments/zoo_decay_members.py first")
    found = re.findall(
        r"zoo_decay_tune model=(net\d) 'tune.optimizers=\"([^\"]+)\"'", path.read_text()
    )
    lists = {net: names.split(",") for net, names in found}
    if sorted(lists) != list(NETS):
        raise ConfigError(f"{path} does not list the members of net1, net2 and net3")
    return lists


def _tune() -> dict:
    """The preset's protocol as its files compose it: conf/tune/random.yaml, then zoo_tune's and
    zoo_search_tune's `tune` nodes (their spaces merged entry by entry)."""
    files = [
        ROOT / "conf" / "tune" / "random.yaml",
        ROOT / "conf" / "experiment" / "zoo_tune.yaml",
        ROOT / "conf" / "experiment" / "zoo_search_tune.yaml",
    ]
    tune: dict = {}
    for path in files:
        node = yaml.safe_load(path.read_text())
        node = node.get("tune", node) if path.parent.name == "experiment" else node
        space = {**(tune.get("space") or {}), **(node.get("space") or {})}
        tune = {**tune, **node, "space": space}
    return tune


def _range(dimension: Dimension, default: Any, decades: float) -> str:
    """A dimension's range as the README states it."""
    if dimension.elements is not None:
        return "; ".join(
            f"[{i}] {_range(e, None, decades)}" if isinstance(e, Dimension) else f"[{i}] {e} held"
            for i, e in enumerate(dimension.elements)
        )
    if dimension.complement:
        return f"{1 - dimension.high:.4g}..{1 - dimension.low:.4g} (1 - beta log-uniform)"
    if dimension.key.endswith(".lr") and isinstance(default, int | float) and default > 0:
        low, high = default / 10**decades, default * 10**decades
        return f"{low:.3g}..{high:.3g} (log; beyond an edge: 2 decades more, twice)"
    zero = "0 one draw in four, else " if dimension.zero else ""
    return f"{zero}{dimension.low:.3g}..{dimension.high:.3g} (log)"


def spaces_table(lists: dict[str, list[str]]) -> str:
    """Each member's search space under the rule: per key, its range and its library's
    default (harness.tuning.spaces)."""
    from harness.tuning.search import search_space

    tune = _tune()
    decades = next(iter(tune["centre"].values()))
    names = list(dict.fromkeys(n for net in NETS for n in lists[net]))
    rows = []
    for name in names:
        node = optimizer_node(name)
        for dimension in search_space(tune, name, node):
            key = dimension.key.removeprefix("optimizer.")
            rows.append(
                {
                    "optimizer": name,
                    "nets": ", ".join(net for net in NETS if name in lists[net]),
                    "key": key,
                    "default": node.get(key),
                    "range": _range(dimension, node.get(key), decades),
                }
            )
    return markdown_table(pd.DataFrame(rows), index=False)


def optimizer_node(name: str) -> dict:
    """An optimizer's config as `optimizer=<name>` composes it: its curated file, else the
    catalogue's."""
    path = ROOT / "conf" / "optimizer" / f"{name}.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else config_of(name)


def command(phase: str, net: str, names: list[str]) -> list[str]:
    """One phase's command for one net (the list quoted: unquoted, Hydra would sweep its names
    one by one; sweep.append: the three nets share the phase's folder)."""
    return [
        "harness-train",
        "-m",
        f"experiment={phase}",
        f"model={net}",
        f'tune.optimizers="{",".join(names)}"',
        "sweep.append=true",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", choices=PHASES, help="run this phase, net by net")
    parser.add_argument("--spaces", action="store_true", help="each member's search space")
    parser.add_argument("extra", nargs="*", help="overrides added to every command")
    args = parser.parse_args()
    lists = members()
    if args.spaces:
        print(spaces_table(lists))
        return
    for net in NETS:
        line = [*command(args.run or PHASES[0], net, lists[net]), *args.extra]
        if not args.run:
            for phase in PHASES:
                shown = command(phase, net, lists[net])
                print(" ".join(shown[:4]) + f" '{shown[4]}' " + " ".join(shown[5:]))
            continue
        print(f"{net}: {len(lists[net])} optimizers", flush=True)
        done = subprocess.run(line, cwd=ROOT)
        if done.returncode:
            sys.exit(done.returncode)


if __name__ == "__main__":
    try:
        main()
    except HarnessError as exc:  # a missing or unreadable members list: one line
        sys.exit(f"{Path(sys.argv[0]).stem}: {exc}")
