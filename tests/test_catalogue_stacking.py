"""Exact in the stack, or not stacked, over the whole optimizer catalogue (issue 18, item 3).

For every name of the catalogue, on a tiny float64 MLP: either the run is refused before
training (run.check: one line), or it cannot join a stack (grouping.refusal says why) and trains
alone, or three runs of it (two learning rates, and a second seed of the first: its own data
order, and one optimizer instance for both seeds where the sharing probe allows it) trained as
one stack give what each gives trained alone, to 1e-10, and run.json records which engine and
update path trained it.
"""

import pandas as pd
import pytest

from conftest import compose_config, hydra_context, max_difference, small
from harness.errors import ConfigError
from harness.optimizers.catalogue import catalogue
from harness.stacking.grouping import refusal, stack_key
from harness.stacking.stack import execute_group
from harness.training.job import Job
from harness.training.run import check, execute_job

NAMES = list(catalogue())
# Each name's outcome here, pinned: a change of any one fails. Refused by run.check (in float64:
# their classes' own checks or dtypes), trained alone (grouping.refusal gives the reason: a
# closure, second-order steps, state outside the parameters' tensors), every other name stacked.
REFUSED = {
    "adalomo", "adammini", "bsam", "demo", "distributedmuon", "fadam", "lomo", "magma", "muon",
    "sparseadam", "spectralsphere", "splus",
}  # fmt: skip
ALONE = {
    "adahessian", "alig", "dash", "gravity", "kron", "lbfgs", "schedulefree_adamwclosure",
    "schedulefree_radamclosure", "schedulefree_sgdclosure", "soap", "sophiah", "spam",
}  # fmt: skip
TINY = ["model=mlp", "model.hidden=[6]", "data.train_size=200", "train.batch_size=20"]


def jobs_of(tmp_path, mnist_dir, name: str) -> list[Job]:
    with hydra_context():
        base = [f"data.root={mnist_dir}", *small("float64", 6, 3, 3), *TINY]
        cfgs = [compose_config([*base, f"optimizer={name}"]) for _ in range(3)]
    if cfgs[0].optimizer.get("lr") is not None:  # two members that differ: two rates
        cfgs[1].optimizer.lr = float(cfgs[0].optimizer.lr) / 2
    cfgs[2].seed = 8  # the first's second seed
    return [Job.of(cfg, tmp_path / f"stacked{i}") for i, cfg in enumerate(cfgs)]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_every_optimizer_is_exact_in_a_stack_or_trains_alone(tmp_path, mnist_dir, name):
    jobs = jobs_of(tmp_path, mnist_dir, name)
    try:
        check(jobs[0])
    except ConfigError as exc:  # refused before training, in one line
        assert name in REFUSED, f"{name} is refused: {exc}"
        assert "\n" not in str(exc)
        return
    assert name not in REFUSED, f"{name} is no longer refused"
    reason = refusal(jobs[0])
    if reason is not None:
        assert name in ALONE, f"{name} no longer stacks: {reason}"
        record = execute_job(jobs[0])
        assert record["engine"] == "single"
        return
    assert name not in ALONE, f"{name} now stacks"
    assert len({stack_key(job) for job in jobs}) == 1
    stacked = execute_group(jobs)
    alone = [
        execute_job(Job.of(job.cfg, tmp_path / f"alone{i}", job.choices))
        for i, job in enumerate(jobs)
    ]
    for i, (s, a) in enumerate(zip(stacked, alone, strict=True)):
        assert s["engine"] == "stacked" and a["engine"] == "single"
        assert s["status"] == a["status"], name
        difference = max_difference(
            pd.read_parquet(tmp_path / f"stacked{i}" / "metrics.parquet"),
            pd.read_parquet(tmp_path / f"alone{i}" / "metrics.parquet"),
        )
        assert difference <= 1e-10, f"{name}: stacked differs from alone by {difference:.3g}"
    assert stacked[0]["update_path"] == stacked[2]["update_path"]  # the seeds of one config


def test_the_pinned_outcomes_name_optimizers_of_the_catalogue():
    assert set(NAMES) >= (REFUSED | ALONE) and not REFUSED & ALONE
