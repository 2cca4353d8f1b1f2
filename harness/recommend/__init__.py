"""`harness-recommend`: which optimizer, at which settings, for the user's network on the user's
data. The zoo's protocol (harness.recommend.protocol: its presets' three phases, choices on
validation only, fresh seeds) over a set of contenders (harness.recommend.settings), its cost
printed before anything trains (harness.recommend.estimate), the answer written as a ranked
table with intervals and the convergence figure (harness.recommend.answer) into
results/recommend/<name>/."""

from __future__ import annotations

import logging
import os
import shlex
import sys

from harness.errors import HarnessError, exit_with_error

PROG = "harness-recommend"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    os.environ["HYDRA_FULL_ERROR"] = "1"
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        recommend(argv)
    except HarnessError as exc:
        exit_with_error(PROG, str(exc))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the same command resumes (finished runs are kept)")
        raise SystemExit(130) from None


def recommend(argv: list[str]) -> None:
    import pandas as pd

    from harness import zoo_phases
    from harness.recommend import answer, estimate, protocol, settings
    from harness.results import load_runs

    request = settings.parse(argv)
    contenders, rule = settings.contenders(request)
    workers = max(1, min(len(os.sched_getaffinity(0)), 2 * len(contenders)))
    cost = estimate.estimate(request, contenders, workers)
    for line in cost.lines():
        print(line, flush=True)
    folder = request.folder
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "phases.log"
    phases = protocol.phases(request, contenders)
    for phase in phases:
        print(f"phase {phase.name}: {phase.folder} (log: {log})", flush=True)
        zoo_phases.run_phase(phase, log)
    runs = load_runs(phases[2].folder)
    runs = runs[runs["optimizer"].astype(str).isin(contenders)]
    table = answer.ranks(runs)
    table.to_csv(folder / "ranks.csv", index=False)
    answer.convergence_png(phases[2].folder, runs, table, folder / "convergence.png")
    quality = str(runs["quality"].iloc[0])
    n = protocol.lengths(request)
    described = [
        "Protocol (the zoo's presets, composed): phase 1 "
        f"{n['budget']} random rates per contender from its own range (two decades each way "
        f"of its default rate; a pick at the edge searched again beyond it), "
        f"{n['trial_iterations']:,} iterations, seed 0; phase 2 the 3 best again at "
        f"{n['iterations']:,}; phase 3 the rate chosen on validation, seeds 1-3, "
        f"{n['iterations']:,} iterations. Folders: `tune/`, `shortlist/`, `evaluate/`"
        + (
            " (smoke mode: tiny subsets, a few iterations; the numbers mean nothing)."
            if request.smoke
            else "."
        ),
    ]
    command = f"{PROG} " + " ".join(shlex.quote(a) for a in argv)
    text = answer.readme(
        f"Which optimizer for {request.name}?",
        command,
        rule,
        described,
        cost.lines(),
        table,
        quality,
        [p.seconds for p in phases],
    )
    (folder / "README.md").write_text(text)
    shown = table[["rank", "optimizer", "lr", f"val_{quality}", f"test_{quality}", "test_ci"]]
    with pd.option_context("display.width", 120):
        print(shown.to_string(index=False))
    print(f"answer: {folder / 'README.md'}")
