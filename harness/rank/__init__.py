"""`harness-rank`: where does one optimizer stand among the zoo's field?

    harness-rank optimizer=lion
    harness-rank optimizer._target_=my_package.MyAdam optimizer.lr=1e-3 model=net2
    harness-rank optimizer=adam optimizer.amsgrad=true schedule=warmup_cosine

Runs the zoo's three phases for that optimizer alone (`protocol`), after a few of the field's
own runs trained again here (`canaries`), and ranks it among the field's phase-3 runs
(`field`) into results/rank/<name>/ (`writing`). An optimizer the field already holds trains
nothing: its rank is read from the committed runs. Bad input is one line on stderr, exit
status 2.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from pathlib import Path

from harness.errors import ConfigError, HarnessError, exit_with_error

log = logging.getLogger("harness.rank")


def main(argv: list[str] | None = None) -> None:
    """The console entry point."""
    argv = sys.argv[1:] if argv is None else list(argv)
    os.environ["HYDRA_FULL_ERROR"] = "1"  # errors raised, and turned into one line here
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    try:
        rank_command(argv)
    except HarnessError as exc:
        exit_with_error("harness-rank", str(exc))
    except KeyboardInterrupt:
        print(
            "harness-rank: interrupted; the runs that finished are kept and the same command "
            "goes on from them",
            file=sys.stderr,
        )
        raise SystemExit(130) from None


def _say(text: str) -> None:
    print(f"harness-rank: {text}", file=sys.stderr, flush=True)


def rank_command(argv: list[str]) -> Path:
    """Rank the optimizer `argv` describes; returns its folder."""
    from dataclasses import replace

    from harness import zoo_phases
    from harness.rank import canaries as canary
    from harness.rank import field, protocol, settings, writing

    start = time.perf_counter()
    request = settings.parse(argv)
    with zoo_phases.composing():
        at_default = protocol.check_optimizer(request)
        name = settings.name_of(request, at_default)
        out = Path(str(request.rank["out"])) / name
        committed: dict[str, list[str]] = {}
        if not request.smoke:  # a smoke run's tiny configs are never the field's
            for net in request.nets:
                found = protocol.in_field(request, net)
                if found is not None:
                    committed[net] = list(found.values())
    costs = [("checks (compose, is it in the field?)", time.perf_counter() - start, 0, 0)]
    to_train = [n for n in request.nets if n not in committed]
    out.mkdir(parents=True, exist_ok=True)
    if committed:
        _say(
            f"{name} is in the field on {', '.join(committed)}: its committed runs, nothing trains"
        )
    checked = None
    if to_train and not request.smoke:
        checked = canary.train_canaries(replace(request, nets=to_train), out)
        if checked is not None:
            costs.append(("canaries", checked.seconds, checked.runs, checked.runs))
            if checked.drift and not request.rank["allow_drift"]:
                raise ConfigError(canary.drift_line(checked))
            _say(
                f"canaries: {checked.runs} runs, "
                + (
                    "drift allowed: " + canary.drift_line(checked)
                    if checked.drift
                    else "as committed"
                )
            )
    if to_train:
        for phase in protocol.phases(replace(request, nets=to_train), out):
            _say(f"phase {phase.name}: training (log: {out / 'phases.log'})")
            zoo_phases.run_phase(phase, out / "phases.log")
            done = f"{phase.runs} runs ({phase.trained} trained) in {phase.seconds:.0f} s"
            _say(f"phase {phase.name}: {done}")
            costs.append((f"phase {phase.name}", phase.seconds, phase.runs, phase.trained))
    begun = time.perf_counter()
    trained = out / zoo_phases.PHASES[2] if to_train else None
    runs, newcomer = field.combined_runs(
        request.field.evaluated, trained, name, committed, request.smoke
    )
    ranked = field.rank(runs, newcomer)
    rows = field.rank_rows(ranked)
    rows.to_csv(out / writing.CSV, index=False)
    paths = [request.field.evaluated, *([trained] if trained else [])]
    figures = [writing.figure(ranked, paths, net, name, out) for net in rows["net"]]
    costs.append(("reading, figures", time.perf_counter() - begun, 0, 0))
    costs = writing.kept_costs(out, costs)
    total = sum(c[1] for c in costs)
    shown = writing.table(rows)
    writing.write_readme(
        out,
        name=name,
        command="harness-rank " + shlex.join(argv),
        request=request,
        rows=rows,
        shown=shown,
        costs=costs,
        total=total,
        canaries=checked,
        committed=committed,
        figures=figures,
    )
    from harness.markdown import markdown_table

    print(markdown_table(shown, index=False))
    print(f"\n{out / writing.README} ({time.perf_counter() - start:.0f} s)")
    return out
