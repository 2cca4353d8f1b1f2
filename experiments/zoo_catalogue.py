"""Which optimizers of the catalogue train on the course nets, and why the others are refused.

    python experiments/zoo_catalogue.py [--data-root ../shared/data/mnist] [--names lion adan]

For every name of `harness.optimizers.catalogue` and each of net1, net2, net3: the run's checks
(`run.check`: the config, then the optimizer's first step and evaluation), then a short
training (60 steps on 2,000 images, single-run engine, float32). Names run 12 to a process under a
memory limit (an optimizer that allocates without bound is told, not fatal); where that
process dies, each of its names again in a process of its own.
Writes results/zoo/catalogue.csv (one row per name and net: outcome, reason) and
results/zoo/catalogue.md (counts and the refusals, for the zoo's write-up); the zoo study's presets
list the names that train on all three nets.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import resource
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "zoo"
NETS = ("net1", "net2", "net3")
MEMORY_LIMIT_GB = 6
BATCH = 12  # names per process
SMALL = [
    "data.train_size=2000",
    "data.val_size=500",
    "data.test_size=500",
    "train.iterations=60",
    "train.eval_every=30",
    "train.log_every=10",
    "train.eval_train_size=500",
    "threads=1",
]


def probe(name: str, data_root: str) -> list[dict[str, str]]:
    """Check and briefly train `name` on each net, in this process."""
    import logging

    from hydra import compose, initialize_config_dir

    from harness.errors import HarnessError
    from harness.training.job import Job
    from harness.training.run import check, execute_job

    logging.disable(logging.INFO)
    warnings.filterwarnings("ignore")
    rows = []
    with (
        initialize_config_dir(str(ROOT / "conf"), version_base="1.3"),
        tempfile.TemporaryDirectory() as tmp,
    ):
        for net in NETS:
            overrides = [f"data.root={data_root}", f"model={net}", f"optimizer={name}", *SMALL]
            job = Job.of(compose("config", overrides), Path(tmp) / net, {"optimizer": name})
            try:
                check(job)
            except HarnessError as exc:
                rows.append({"outcome": "refused", "reason": str(exc).splitlines()[0]})
                continue
            try:
                record = execute_job(job)
            except HarnessError as exc:
                rows.append({"outcome": "refused", "reason": str(exc).splitlines()[0]})
                continue
            reason = record.get("error") or ""
            seconds = record.get("step_time_alone_s")
            rows.append(
                {
                    "outcome": f"trains ({record['status']})",
                    "reason": reason,
                    "step_time_alone_s": "" if seconds is None else f"{seconds:.6f}",
                }
            )
    return [{"name": name, "net": net, **row} for net, row in zip(NETS, rows, strict=True)]


def _limit_memory() -> None:
    limit = MEMORY_LIMIT_GB * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def probe_in_process(names: list[str], data_root: str) -> list[dict[str, str]]:
    """`probe` of the names in one process under the memory limit (a process costs seconds to
    start); if that process dies, each name again in a process of its own."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[2]); from zoo_catalogue import probe\n"
        "for name in sys.argv[3:]: print('ROWS' + json.dumps(probe(name, sys.argv[1])), "
        "flush=True)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, data_root, str(Path(__file__).parent), *names],
        capture_output=True,
        text=True,
        preexec_fn=_limit_memory,
        check=False,
    )
    found = [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("ROWS")]
    if len(found) == len(names):
        return [row for rows in found for row in rows]
    if len(names) > 1:
        return [row for name in names for row in probe_in_process([name], data_root)]
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    why = "out of memory" if "MemoryError" in done.stderr or done.returncode < 0 else last
    return [
        {"name": names[0], "net": net, "outcome": "crashed", "reason": why[:200]} for net in NETS
    ]


def summary(rows: list[dict[str, str]]) -> str:
    """Markdown: how many names train on every net, and each refusal's reason."""
    by_name: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
    for row in rows:
        by_name[row["name"]].append(row)
    trains = [n for n, rs in by_name.items() if all(r["outcome"].startswith("trains") for r in rs)]
    lines = [
        f"{len(by_name)} optimizers in the catalogue: **{len(trains)} train on net1-net3**, "
        f"{len(by_name) - len(trains)} are refused before training (or fail) with one line:",
        "",
        "| optimizer | net | outcome | reason |",
        "|---|---|---|---|",
    ]
    for name, rs in by_name.items():
        if name in trains:
            continue
        for r in rs:
            if not r["outcome"].startswith("trains") or r["reason"]:
                reason = r["reason"].replace("|", "\\|")
                lines.append(f"| {name} | {r['net']} | {r['outcome']} | {reason} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data" / "mnist"))
    parser.add_argument("--names", nargs="*", help="these names only (default: all)")
    args = parser.parse_args()
    from harness.optimizers.catalogue import catalogue

    names = args.names or list(catalogue())
    rows = []
    for start in range(0, len(names), BATCH):
        found = probe_in_process(names[start : start + BATCH], args.data_root)
        for name in names[start : start + BATCH]:
            outcomes = ", ".join(r["outcome"] for r in found if r["name"] == name)
            print(f"{name}: {outcomes}", flush=True)
        rows += found
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "catalogue.csv", "w", newline="", encoding="utf-8") as f:
        fields = ["name", "net", "outcome", "reason", "step_time_alone_s"]
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    (OUT / "catalogue.md").write_text(summary(rows), encoding="utf-8")
    print(summary(rows))


if __name__ == "__main__":
    main()
