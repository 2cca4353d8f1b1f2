"""A stack's step as one CUDA graph, and stacks sharing one GPU from worker processes: the
capturable stepper trains exactly (on the CPU too), which stacks and updates are captured, the
probe that keeps eager execution where a replay differs, the worker count on a GPU. The tests
that need a GPU are skipped without one, with the reason."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from conftest import CONF_DIR, compose_config, hydra_context, small
from harness.config.identity import config_hash
from harness.config.validate import validate_train
from harness.errors import ConfigError
from harness.stacking import cuda_graph
from harness.stacking.functional import StackedModule
from harness.stacking.stack import Stack, train_stack
from harness.sweeps import gpu_workers
from harness.sweeps.execute import execute_jobs
from harness.sweeps.plan import default_workers
from harness.training.job import Job
from harness.training.run import prepare, train_single
from harness.training.stepping import OPTIMIZER_STEP, SHARED_STEP, STACKED_RULE, TORCH_FUSED

OPTIMIZERS = sorted(p.stem for p in (CONF_DIR / "optimizer").glob("*.yaml"))
needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device: CUDA graphs and stacks sharing a GPU cannot run on the CPU",
)


def configs(mnist_dir, variants, base=(), dtype="float64", steps=40):
    with hydra_context():
        common = [f"data.root={mnist_dir}", *small(dtype, steps, 20, 10), *base]
        return [compose_config([*common, *v]) for v in variants]


def rows_of(outcome) -> np.ndarray:
    """An outcome's recorded values without their times: (iteration, metric index, value)."""
    return np.array([r[4] for r in outcome.recorder.rows])


def stack_of(cfgs, capturable: bool) -> Stack:
    runs = [prepare(Job.of(cfg, "unused")) for cfg in cfgs]
    setup = runs[0].setup
    return Stack(
        [r.model for r in runs],
        [r.optimizer for r in runs],
        [r.scheduler for r in runs],
        setup.problem,
        setup.data,
        capturable=capturable,
    )


# --- the capturable stepper: exact on any device --------------------------------------------


@pytest.mark.slow
def test_a_capturable_stack_trains_as_each_run_alone(mnist_dir):
    """The stepper's form a CUDA graph captures (coefficients read from one tensor, torch's
    fused classes by their stacked rule) gives each run what it gives alone, in float64: every
    course optimizer on net2 (over 50,000 parameters: Adam's family and SGD would step fused),
    two seeds each (a batch per model), and one that diverges and leaves the stack."""
    variants = [[f"optimizer={o}", f"seed={s}"] for o in OPTIMIZERS for s in (1, 2)]
    variants.append(["optimizer=sgd", "optimizer.lr=1e4"])
    cfgs = configs(mnist_dir, variants, base=["model=net2"])
    jobs = [Job.of(cfg, "unused") for cfg in cfgs]
    stacked = train_stack([prepare(job) for job in jobs], capturable=True)
    for variant, job, outcome in zip(variants, jobs, stacked, strict=True):
        alone = train_single(prepare(job))
        assert outcome.status == alone.status, variant
        a, b = rows_of(outcome), rows_of(alone)
        assert np.array_equal(np.isfinite(a), np.isfinite(b)), variant
        assert np.abs(a - b)[np.isfinite(a)].max() <= 1e-10, variant
        assert outcome.cuda_graph is None  # on the CPU: nothing to capture
    paths = {v[0]: o.update_path for v, o in zip(variants, stacked, strict=True)}
    assert paths["optimizer=adam"] == paths["optimizer=momentum"] == STACKED_RULE  # not fused
    assert paths["optimizer=radam"] == SHARED_STEP
    assert paths["optimizer=yellowfin"] == OPTIMIZER_STEP
    assert stacked[-1].status == "diverged"


def test_on_the_cpu_a_stack_steps_as_before(mnist_dir):
    """Not capturable (the CPU's form): torch's fused classes keep their fused step."""
    cfgs = configs(mnist_dir, [["optimizer=adam"], ["optimizer=sgd"]], base=["model=net2"])
    outcomes = train_stack([prepare(Job.of(cfg, "unused")) for cfg in cfgs])
    assert [o.update_path for o in outcomes] == [TORCH_FUSED, TORCH_FUSED]


# --- what is captured, and the probe's decision ---------------------------------------------


def test_which_stacks_and_updates_are_captured(mnist_dir):
    cfgs = configs(mnist_dir, [["optimizer=adam"], ["optimizer=radam"]], base=["model=net1"])
    members = stack_of(cfgs, capturable=True)
    assert cuda_graph.stack_refusal("auto", members) is None
    assert cuda_graph.stack_refusal("off", members) == "train.cuda_graph=off"
    assert stack_of(cfgs, capturable=False).stepper.paths() == [STACKED_RULE, OPTIMIZER_STEP]
    assert "train.cuda_graph=off" in cuda_graph.stack_refusal("auto", stack_of(cfgs, False))
    members.stack = StackedModule(members.models)
    assert "torch.func" in cuda_graph.stack_refusal("auto", members)

    assert cuda_graph.member_refusal(STACKED_RULE) is None
    for path in (OPTIMIZER_STEP, SHARED_STEP, TORCH_FUSED):
        assert cuda_graph.member_refusal(path)
    paths = [STACKED_RULE, OPTIMIZER_STEP]
    assert cuda_graph.notes(None, None, paths) == [
        "captured",
        f"captured, its update eager ({cuda_graph.member_refusal(OPTIMIZER_STEP)})",
    ]
    assert cuda_graph.notes(None, "its replay differs", paths) == ["eager (its replay differs)"] * 2
    assert (
        cuda_graph.notes("train.cuda_graph=off", None, paths)
        == ["not captured (train.cuda_graph=off)"] * 2
    )


def test_the_probes_verdict_is_bitwise():
    a = torch.tensor([1.0, float("nan"), float("inf")])
    assert cuda_graph.verdict([a, torch.arange(3)], [a.clone(), torch.arange(3)]) is None
    b = a.clone()
    b[0] = torch.nextafter(b[0], torch.tensor(2.0))  # one bit
    assert "differs from eager execution (tensor 0" in cuda_graph.verdict([a], [b])
    assert "is torch.float64[3]" in cuda_graph.verdict([a], [a.double()])
    assert "left 2 tensors" in cuda_graph.verdict([a], [a, a])
    assert not cuda_graph.same_bits(torch.tensor(0.0), torch.tensor(-0.0))


def test_probe_rows_are_shaped_as_the_stacks_batches():
    shared = cuda_graph.probe_rows(100, 8, 3, False, torch.device("cpu"))
    per_model = cuda_graph.probe_rows(100, 8, 3, True, torch.device("cpu"))
    assert len(shared) == cuda_graph.PROBE_STEPS
    assert shared[0].shape == (8,) and per_model[0].shape == (3, 8)
    assert per_model[1].max() < 100 and len(set(per_model[0][:, 0].tolist())) == 3


def test_the_probe_keeps_eager_where_a_replay_freezes_a_value(mnist_dir):
    """The probe's logic on the CPU, a replay given: one that runs the eager step passes; one
    that freezes the step's coefficients at its first step (as a graph would freeze a Python
    number) is refused; either way the stack is put back as it was before its first step."""
    cfgs = configs(mnist_dir, [["optimizer=adam"], ["optimizer=sgd", "optimizer.momentum=0.9"]])
    members = stack_of(cfgs, capturable=True)
    start = [t.clone() for t, _ in members.stack.tensors()]
    rows = cuda_graph.probe_rows(1000, 50, 2, False, torch.device("cpu"))

    def frozen(step):
        first = []

        def replayed(batch):
            coefficients = members.stepper.coefficients.flat
            if first:
                coefficients.copy_(first[0])
            else:
                first.append(coefficients.clone())
            return step(batch)

        return replayed

    assert cuda_graph.probe(members, rows, replay=lambda step: step) is None
    reason = cuda_graph.probe(members, rows, replay=frozen)
    assert reason is not None and "differs from eager execution" in reason
    for (tensor, grad), saved in zip(members.stack.tensors(), start, strict=True):
        assert torch.equal(tensor, saved) and not grad.any()
    assert members.stepper.step_count == 0 and not members.stepper.rule_states()


# --- settings ---------------------------------------------------------------------------------


def test_cuda_graph_is_an_execution_setting_checked_in_one_line(mnist_dir):
    (auto,) = configs(mnist_dir, [[]])
    (off,) = configs(mnist_dir, [["train.cuda_graph=off"]])
    assert auto.train.cuda_graph == "auto"
    as_dict = [OmegaConf.to_container(c, resolve=True) for c in (auto, off)]
    assert config_hash(as_dict[0]) == config_hash(as_dict[1])
    bad = off.copy()
    bad.train.cuda_graph = "sometimes"
    with pytest.raises(ConfigError, match="train.cuda_graph must be one of auto, off"):
        validate_train(bad.train)


# --- worker processes on a GPU ----------------------------------------------------------------


@pytest.mark.slow
def test_the_worker_count_on_a_gpu_follows_its_rule(mnist_dir):
    """min(cores - 1, the cap, what the device's memory holds), stated in the log's words."""
    lrs = [f"optimizer.lr={0.01 * (i + 1):g}" for i in range(64)]
    jobs = [Job.of(c, "unused") for c in configs(mnist_dir, [[lr] for lr in lrs])]
    cap = gpu_workers.CUDA_WORKER_CAP
    assert gpu_workers.cuda_workers(jobs, 80 * 2**30, 16)[0] == cap
    unknown = f"min(16 cores - 1, cap {cap}; the device's memory unknown)"
    assert gpu_workers.cuda_workers(jobs, None, 16) == (cap, unknown)
    assert gpu_workers.cuda_workers(jobs, 80 * 2**30, 4)[0] == 3
    assert gpu_workers.cuda_workers(jobs, 80 * 2**30, 1)[0] == 1
    each = gpu_workers.worker_bytes(jobs[0], 32)  # two workers: 32 models each
    assert each > gpu_workers.PROCESS_BYTES + gpu_workers.data_bytes(jobs[0])
    workers, rule = gpu_workers.cuda_workers(jobs, int(2.5 * each / 0.9), 16)
    assert workers == 2 and "2 x" in rule and "within 90%" in rule
    assert gpu_workers.stack_bytes(jobs[0], 10) == 10 * gpu_workers.stack_bytes(jobs[0], 1)
    assert default_workers(jobs) == (os.cpu_count() or 1)  # on the CPU


# --- on a GPU -----------------------------------------------------------------------------------


@needs_cuda
def test_a_stack_replayed_from_its_graph_equals_its_eager_steps(mnist_dir, monkeypatch):
    """Every course optimizer and a third-party one (Lion, two seeds sharing an instance), a
    diverging run that leaves the stack (captured again), float32: the replayed stack's records
    are the eager stack's, bit for bit."""
    variants = [[f"optimizer={o}"] for o in OPTIMIZERS]
    variants += [["optimizer=lion", "optimizer.lr=3e-4", f"seed={s}"] for s in (1, 2)]
    variants.append(["optimizer=sgd", "optimizer.lr=1e4"])
    cfgs = configs(mnist_dir, variants, ["model=net2", "device=cuda"], "float32", 60)

    def trained():
        return train_stack([prepare(Job.of(cfg, "unused")) for cfg in cfgs])

    replayed = trained()
    monkeypatch.setattr(cuda_graph, "probe", lambda *args, **kwargs: "kept eager")
    eager = trained()
    for variant, a, b in zip(variants, replayed, eager, strict=True):
        assert a.status == b.status, variant
        assert np.array_equal(rows_of(a), rows_of(b), equal_nan=True), variant
        assert b.cuda_graph == "eager (kept eager)"
        if a.update_path == STACKED_RULE:
            assert a.cuda_graph == "captured", variant
        else:
            assert a.cuda_graph.startswith("captured, its update eager ("), variant
    assert replayed[-1].status == "diverged"


@needs_cuda
def test_stacks_in_worker_processes_on_a_gpu_equal_this_process_bit_for_bit(mnist_dir, tmp_path):
    """The same stacks (max_stack: the same plan either way), trained here and in two worker
    processes sharing the GPU: the same bits in every run's metrics."""
    variants = [[f"optimizer={o}", f"seed={s}"] for o in ("adam", "sgd", "lion") for s in (1, 2)]
    cfgs = configs(mnist_dir, variants, ["model=net2", "device=cuda"], "float32", 60)

    def metrics(folder, use_workers):
        jobs = [Job.of(cfg, tmp_path / folder / str(i)) for i, cfg in enumerate(cfgs)]
        execute_jobs(jobs, workers=2, use_workers=use_workers, max_stack=3)
        return [pd.read_parquet(job.out_dir / "metrics.parquet") for job in jobs]

    for a, b in zip(metrics("here", False), metrics("workers", True), strict=True):
        assert a.drop(columns="time_s").equals(b.drop(columns="time_s"))


@needs_cuda
def test_the_launcher_does_not_initialise_cuda_before_its_workers(mnist_dir, tmp_path):
    """The workers are spawned; the launcher's process has not touched CUDA when it starts
    them (it reads the device's memory with nvidia-smi)."""
    script = textwrap.dedent(
        f"""
        import concurrent.futures, sys, torch
        sys.path.insert(0, {str(CONF_DIR.parent / "tests")!r})
        from conftest import compose_config, hydra_context, small
        from harness.training.job import Job
        from harness.sweeps.execute import execute_jobs

        original = concurrent.futures.ProcessPoolExecutor.__init__

        def checked(self, *args, **kwargs):
            assert not torch.cuda.is_initialized(), "CUDA initialised before the workers"
            assert kwargs["mp_context"].get_start_method() == "spawn"
            original(self, *args, **kwargs)

        concurrent.futures.ProcessPoolExecutor.__init__ = checked
        with hydra_context():
            base = ["data.root={mnist_dir}", *small("float32", 20, 10, 5), "device=cuda"]
            cfgs = [compose_config([*base, f"optimizer={{o}}"]) for o in ("sgd", "adam")]
        jobs = [Job.of(c, {str(tmp_path)!r} + f"/{{i}}") for i, c in enumerate(cfgs)]
        records = execute_jobs(jobs, use_workers=True)
        print("trained", len(records))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "trained 2" in done.stdout
