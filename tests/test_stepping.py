"""Optimizers that need more of the training step than backward() and step(): a closure
(L-BFGS), second-order backward (AdaHessian, SophiaH), train/eval modes (Schedule-Free).
They train with the single-run engine, and the stack refuses them in one line."""

import pytest
import torch

from conftest import SMALL_RUN, compose_config
from harness.stacking.grouping import refusal
from harness.training.job import Job
from harness.training.run import execute, prepare, train_single
from harness.training.stepping import Needs, evaluation_mode, needs_of, take_step


def config(mnist_dir, *overrides):
    return compose_config([f"data.root={mnist_dir}", *SMALL_RUN, "model=net1", *overrides])


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,needs",
    [
        ("lbfgs", Needs(closure=True)),
        ("adahessian", Needs(create_graph=True)),
        ("sophiah", Needs(create_graph=True)),
        ("schedulefree_adamw", Needs(modes=True)),
        ("adam", Needs()),
        ("lion", Needs()),
    ],
)
def test_needs_are_read_off_the_optimizer_and_the_stack_refuses_them(mnist_dir, name, needs):
    """A stack refuses a closure and second-order backward; it switches train/eval modes."""
    cfg = config(mnist_dir, f"optimizer={name}")
    run = prepare(Job.of(cfg, "unused"))
    assert needs_of(run.optimizer) == needs
    reason = refusal(Job.of(cfg, "unused"))
    refused = needs.closure or needs.create_graph
    assert (reason is not None) == refused, reason
    if refused:
        assert reason.endswith(f"needs {needs.describe()}")


def test_schedule_free_is_evaluated_at_its_averaged_point(tmp_path, mnist_dir):
    record = execute(config(mnist_dir, "optimizer=schedulefree_sgd", "optimizer.lr=0.5"), tmp_path)
    cfg = config(mnist_dir, "optimizer=schedulefree_sgd", "optimizer.lr=0.5")
    run = prepare(Job.of(cfg, "unused"))
    train_single(run)  # the same run again, in this process: its model and optimizer at the end
    data = run.setup.data
    with evaluation_mode(run.optimizer, needs_of(run.optimizer)):
        at_average = run.setup.problem.evaluate(run.model, data, "test", None)["loss"]
    at_training_point = run.setup.problem.evaluate(run.model, data, "test", None)["loss"]
    assert record["final"]["test_loss"] == pytest.approx(at_average, rel=1e-6)
    assert abs(at_average - at_training_point) > 1e-4  # the two points differ: modes matter


def test_mode_switches_print_nothing_into_a_sweeps_log(tmp_path, mnist_dir, capfd):
    """schedulefree's reference classes print at every switch of mode: a run's evaluations
    (and a sweep's thousands) would fill the log with "Switching to train mode"."""
    cfg = config(mnist_dir, "optimizer=schedulefree_adamwreference", "optimizer.lr=0.01")
    run = prepare(Job.of(cfg, "unused"))
    capfd.readouterr()
    with evaluation_mode(run.optimizer, needs_of(run.optimizer)):
        pass
    assert needs_of(run.optimizer).modes
    execute(cfg, tmp_path)  # a whole run: 4 evaluations
    assert "Switching" not in capfd.readouterr().out
    run.optimizer.eval()  # what it prints, switched directly
    assert "Switching to eval mode" in capfd.readouterr().out


def test_a_closure_is_evaluated_and_the_step_reports_the_loss_before_it():
    torch.manual_seed(0)
    x, y = torch.randn(64, 5), torch.randn(64, 1)
    model = torch.nn.Linear(5, 1)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
    calls = []

    def batch_loss():
        calls.append(1)
        return torch.nn.functional.mse_loss(model(x), y)

    before = batch_loss().item()
    calls.clear()
    first = take_step(optimizer, needs_of(optimizer), batch_loss).item()
    assert first == pytest.approx(before) and len(calls) > 1  # L-BFGS evaluates it again
    assert batch_loss().item() < before


def test_second_order_optimizers_need_the_graph_of_the_gradient(tmp_path, mnist_dir):
    record = execute(config(mnist_dir, "optimizer=adahessian", "optimizer.lr=0.05"), tmp_path)
    assert record["status"] == "completed"
    assert record["final"]["train_loss"] < 1.0
    cfg = config(mnist_dir, "optimizer=adahessian")
    run = prepare(Job.of(cfg, "unused"))
    idx = torch.arange(32)
    with pytest.raises(RuntimeError, match="does not require grad"):  # what create_graph avoids
        take_step(
            run.optimizer, Needs(), lambda: run.setup.problem.loss(run.model, run.setup.data, idx)
        )
