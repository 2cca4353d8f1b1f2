"""The answer's cost, printed before anything trains: each contender's step timed alone on the
user's model and data by the harness's own first-step check (`harness.training.run.check`, which
also refuses bad data, a model that refuses it, or an optimizer that cannot step, in one line),
times the steps of each phase, plus its evaluations."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from harness.recommend.protocol import EDGE_TRIALS, SEEDS, SHORTLIST, lengths
from harness.recommend.settings import Request
from harness.zoo_phases import composed


@dataclass
class Cost:
    step_s: dict[str, float]  # each contender's step alone, seconds
    phase_s: tuple[float, float, float]  # core-seconds of phases 1-3 (phase 1 without edges)
    edge_s: float  # at most this much more in phase 1, if every pick is at an edge twice
    runs: tuple[int, int, int]
    workers: int

    @property
    def total_s(self) -> float:
        return sum(self.phase_s)

    def lines(self) -> list[str]:
        t = [_time(s) for s in self.phase_s]
        return [
            f"cost estimate: {sum(self.runs)} runs ({self.runs[0]} trials, {self.runs[1]} "
            f"shortlisted, {self.runs[2]} seeds), {_time(self.total_s)} of one core "
            f"(phase 1 {t[0]}, up to {_time(self.edge_s)} more beyond edges; "
            f"phase 2 {t[1]}; phase 3 {t[2]}), "
            f"~{_time(self.total_s / self.workers)} on {self.workers} worker(s) "
            "(steps timed alone; stacks train faster)",
            "step alone: "
            + ", ".join(f"{c} {s * 1000:.1f} ms" for c, s in sorted(self.step_s.items())),
        ]


def _time(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def estimate(request: Request, contenders: list[str], workers: int) -> Cost:
    """Check every contender's phase-1 run (bad input: one line, before anything is written)
    and time its step; the phases' cost from those times."""
    import torch

    from harness.recommend.protocol import phase_overrides
    from harness.training import run as run_module
    from harness.training.first_step import checked_step_time
    from harness.training.job import Job
    from harness.zoo_phases import composing

    n = lengths(request)
    step_s, evals = {}, 0.0
    with composing(), tempfile.TemporaryDirectory() as tmp:
        for contender in contenders:
            overrides = [
                o
                for o in phase_overrides(request, [contender], 0)
                if not o.startswith(("hydra.", "tune."))
            ]
            cfg = composed(overrides)
            job = Job.of(cfg, tmp, {"optimizer": contender})
            torch.set_num_threads(1)  # the workers' own: a step timed as it will train
            run_module.check(job)
            step_s[contender] = checked_step_time(job) or 0.0
        train = cfg.train
        # an evaluation: the training subset and each held-out split, a forward pass (a third
        # of a step) per batch of examples
        from harness.training.job import load_data

        held_out = len(job.problem.held_out(load_data(cfg, job.problem)))
        evals = train.eval_train_size * (1 + held_out) / train.batch_size / 3

    def seconds(steps: int, every: int, runs_each: int) -> float:
        per_step = sum(step_s.values())
        return runs_each * per_step * (steps + (steps // every + 1) * evals)

    from harness.recommend.protocol import eval_every

    t1, t = n["trial_iterations"], n["iterations"]
    c = len(contenders)
    phase_s = (
        seconds(t1, eval_every(t1, 500), n["budget"]),
        seconds(t, eval_every(t, 1000), SHORTLIST),
        seconds(t, eval_every(t, 500), SEEDS),
    )
    edge_s = phase_s[0] / n["budget"] * EDGE_TRIALS
    runs = (c * n["budget"], c * SHORTLIST, c * SEEDS)
    return Cost(step_s, phase_s, edge_s, runs, workers)
