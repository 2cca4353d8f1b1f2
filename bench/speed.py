"""Speed of the engines against the plain PyTorch loop a user would write, on MNIST.

    python bench/speed.py                      # net1, net2, net3 x 16 configs, 500 iterations
    python bench/speed.py --iterations 2000 --nets net3
    python bench/speed.py --nets lenet         # a CNN: single-run engine against its stack
    python bench/speed.py --course             # also the whole course study with each engine
    python bench/speed.py --before 08082fc     # the engines of that revision beside this tree's

Side by side in one invocation, on the same data and iterations:
  (a) the plain loop: nn.Sequential, torch.optim, DataLoader(TensorDataset, shuffle=True);
  (b) the single-run engine (harness.training.engine.train), one run after another;
  (c) the stacked engine: all configs of a net as one stack in one process (torch's default
      threads), by the hand-written MLP stack (harness.stacking.mlp, what MLPs use) and by
      the torch.func stack any other model uses (harness.stacking.functional), interleaved
      --repeats times (medians); and split into one single-threaded worker process per core
      (execute_jobs). --stacked-only times the two stacked paths alone.
With --before REV, only the engines — (b), and (c) in one process by both stacked paths — are
timed, each in a process of its own, alternating between the harness of revision REV (a
temporary git worktree on PYTHONPATH) and this tree's, --repeats times (medians).
Times are optimisation only (evaluations excluded); per model = total / number of configs.
GFLOP/s counts forward + backward matrix products; the peak is large fp32 matmuls measured in
the same run (one matmul on all threads, or one single-threaded matmul per core at once: the
larger).
Data root: --data-root or $HARNESS_DATA_ROOT.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.problems.classification.mnist import load_mnist
from harness.problems.classification.networks import MLP_TARGET
from harness.stacking.functional import StackedModule
from harness.stacking.mlp import StackedMLP
from harness.stacking.stack import train_stack
from harness.sweeps.execute import execute_jobs
from harness.training import run as run_module
from harness.training.job import Job

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = os.environ.get("HARNESS_DATA_ROOT", str(REPO.parent / "shared" / "data" / "mnist"))
# 16 optimizer/learning-rate configs: four learning rates of four optimizers.
CONFIGS = [
    (name, lr)
    for name, lrs in {
        "sgd": (0.05, 0.1, 0.2, 0.4),
        "momentum": (0.005, 0.01, 0.02, 0.04),
        "adam": (0.0005, 0.001, 0.002, 0.004),
        "rmsprop": (0.00025, 0.0005, 0.001, 0.002),
    }.items()
    for lr in lrs
]


def matmul_peak(threads: int, n: int = 2048, repeats: int = 7) -> float:
    """GFLOP/s of one large fp32 matmul (median of `repeats`)."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - tic)
    return 2 * n**3 / statistics.median(times) / 1e9


def _matmul_worker(barrier, results, n: int, repeats: int) -> None:
    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    barrier.wait()  # all processes multiply at the same time
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - tic)
    results.put(2 * n**3 / statistics.median(times) / 1e9)


def matmul_peak_processes(processes: int, n: int = 2048, repeats: int = 7) -> float:
    """GFLOP/s of `processes` single-threaded processes each multiplying large fp32 matrices at
    once: the peak of the stacked engine's layout (one single-threaded worker per core)."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [
        context.Process(target=_matmul_worker, args=(barrier, results, n, repeats))
        for _ in range(processes)
    ]
    for w in workers:
        w.start()
    total = sum(results.get() for _ in workers)
    for w in workers:
        w.join()
    return total


def overrides(root: str, net: str, optimizer: str, lr: float | None, iterations: int) -> list[str]:
    out = [f"data.root={root}", f"model={net}", f"optimizer={optimizer}", "train.progress=false"]
    out += [f"train.iterations={iterations}", f"train.eval_every={iterations}"]
    out += ["train.log_every=10"] if iterations % 10 == 0 else ["train.log_every=1"]
    return out + ([f"optimizer.lr={lr}"] if lr is not None else [])


def stacked(cfg):
    cfg = cfg.copy()
    cfg.train.engine = "stacked"
    return cfg


def plain_loop(cfg, x: torch.Tensor, y: torch.Tensor, iterations: int) -> float:
    """(a): the loop from the tutorials; returns seconds for `iterations` steps."""
    sizes = [x.shape[1], *cfg.model.hidden, 10]
    layers: list[nn.Module] = []
    acts = {"sigmoid": nn.Sigmoid, "relu": nn.ReLU}
    for i, (a, b) in enumerate(zip(sizes, sizes[1:], strict=False)):
        layers.append(nn.Linear(a, b))
        if i < len(cfg.model.hidden):
            layers.append(acts[cfg.model.activations[i]]())
    model = nn.Sequential(*layers)
    kwargs = {k: v for k, v in cfg.optimizer.items() if k not in ("_target_", "_partial_")}
    optimizer = get_class(cfg.optimizer._target_)(model.parameters(), **kwargs)
    loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True, drop_last=True)
    loss_fn = nn.CrossEntropyLoss()
    done = 0
    tic = time.perf_counter()
    while done < iterations:
        for xb, yb in loader:
            loss = loss_fn(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            done += 1
            if done == iterations:
                break
    return time.perf_counter() - tic


def single_engine(cfg) -> float:
    """(b): harness.training.engine.train; returns the optimisation time."""
    return run_module.train_single(run_module.prepare(Job.of(cfg, "unused"))).train_time_s


def data_loading(x: torch.Tensor, y: torch.Tensor, batches: int) -> list[tuple[str, float]]:
    """Microseconds per mini-batch of 128 for the loading variants."""
    results = []

    def loader_time(**kwargs) -> float:
        loader = DataLoader(
            TensorDataset(x, y), batch_size=128, shuffle=True, drop_last=True, **kwargs
        )
        done, tic = 0, time.perf_counter()
        while done < batches:
            for _ in loader:
                done += 1
                if done == batches:
                    break
        return (time.perf_counter() - tic) / batches * 1e6

    results.append(("DataLoader(TensorDataset), 0 workers", loader_time()))
    results.append(("DataLoader(TensorDataset), 2 workers", loader_time(num_workers=2)))
    pin = torch.cuda.is_available()
    label = "DataLoader, pinned memory" + ("" if pin else " (no GPU: pinning is a no-op)")
    results.append((label, loader_time(pin_memory=pin)))

    def tensor_time(xs: torch.Tensor, ys: torch.Tensor) -> float:
        n, done = len(ys), 0
        tic = time.perf_counter()
        while done < batches:
            perm = torch.randperm(n).to(xs.device)
            for start in range(0, n - 127, 128):
                idx = perm[start : start + 128]
                xs[idx], ys[idx]  # the batch a training step would use
                done += 1
                if done == batches:
                    break
        if xs.is_cuda:
            torch.cuda.synchronize()
        return (time.perf_counter() - tic) / batches * 1e6

    results.append(("pre-loaded tensors, randperm + index", tensor_time(x, y)))
    if torch.cuda.is_available():
        results.append(("device-resident tensors (CUDA)", tensor_time(x.cuda(), y.cuda())))
    else:
        results.append(
            ("device-resident tensors (CPU here: same as pre-loaded)", tensor_time(x, y))
        )
    return results


def interleaved(cfgs, repeats: int, paths: dict[str, Callable[[list], float]]) -> dict[str, float]:
    """Seconds per model of training `cfgs` by each of `paths` (name -> a function of the
    configs returning seconds per model): medians of `repeats`, the paths interleaved so that
    a change of the machine's load falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeats):
        for name, path in paths.items():
            times[name].append(path(cfgs))
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def stack_path(stack_class: type) -> Callable[[list], float]:
    """One stack of the configs in this process, by `stack_class`: seconds per model."""

    def seconds(cfgs) -> float:
        runs = [run_module.prepare(Job.of(c, "unused")) for c in cfgs]
        return train_stack(runs, stack_class=stack_class)[0].train_time_s / len(cfgs)

    return seconds


def single_path(cfgs) -> float:
    """The configs one after another with the single-run engine: seconds per model."""
    return sum(single_engine(c) for c in cfgs) / len(cfgs)


def bench_net(args, net: str, peak: float, x: torch.Tensor, y: torch.Tensor) -> dict:
    it = args.iterations
    cfgs = [compose("config", overrides(args.data_root, net, o, lr, it)) for o, lr in CONFIGS]
    n = len(cfgs)
    flops = Job.of(cfgs[0], "unused").problem.flops(cfgs[0]) * it  # per model
    threads = os.cpu_count() or 1
    mlp = cfgs[0].model._target_ == MLP_TARGET  # (a) and the hand-written stack are MLPs' only
    rows = {}
    if not args.stacked_only:
        torch.set_num_threads(threads)
        if mlp:
            plain = sum(plain_loop(c, x, y, it) for c in cfgs) / n
            torch.set_num_threads(1)
            rows[f"(a) plain PyTorch loop ({threads} threads)"] = plain
            rows["(a) plain PyTorch loop, 1 thread"] = (
                sum(plain_loop(c, x, y, it) for c in cfgs) / n
            )
            torch.set_num_threads(threads)
            rows["(b) single-run engine"] = single_path(cfgs)
    torch.set_num_threads(threads)
    stacked_in_process = f"(c) stacked, 1 process x {threads} threads"
    paths = (
        {
            f"{stacked_in_process}, hand-written MLP stack": stack_path(StackedMLP),
            f"{stacked_in_process}, torch.func stack": stack_path(StackedModule),
        }
        if mlp
        else {  # any other model: its stack against training alone, interleaved
            "(b) single-run engine": single_path,
            f"{stacked_in_process}, torch.func stack": stack_path(StackedModule),
        }
    )
    rows |= interleaved(cfgs, args.repeats, paths)
    if not args.stacked_only:
        with tempfile.TemporaryDirectory() as tmp:
            jobs = [Job.of(stacked(c), Path(tmp) / str(i)) for i, c in enumerate(cfgs)]
            records = execute_jobs(jobs, workers=args.workers, use_workers=True)
        label = f"(c) stacked, {args.workers} processes x 1 thread"
        rows[label] = max(r["train_time_s"] for r in records) / n
    baseline = next(iter(rows.values()))  # (a) or (b), or the first stack with --stacked-only
    out = {}
    for label, seconds in rows.items():
        gflops = flops / seconds / 1e9
        out[label] = (seconds / it * 1000, baseline / seconds, gflops, gflops / peak)
    return out


def engine_times(args, net: str) -> dict[str, float]:
    """Seconds per model of the configs of `net` by the single-run engine and by each stacked
    path in this process (one run each): what --before compares."""
    it = args.iterations
    cfgs = [compose("config", overrides(args.data_root, net, o, lr, it)) for o, lr in CONFIGS]
    torch.set_num_threads(os.cpu_count() or 1)
    times = {"(b) single-run engine": single_path(cfgs)}
    if cfgs[0].model._target_ == MLP_TARGET:
        times["(c) stacked, hand-written MLP stack"] = stack_path(StackedMLP)(cfgs)
    times["(c) stacked, torch.func stack"] = stack_path(StackedModule)(cfgs)
    return times


def before_and_now(args) -> None:
    """--before REV: the engines' times of revision REV and of this tree, alternating."""
    from sweeps import worktree

    trees = {f"at {args.before}": None, "now": REPO}
    times: dict[tuple[str, str, str], list[float]] = {}
    with worktree(args.before) as before:
        trees[f"at {args.before}"] = before
        for _ in range(args.repeats):
            for tree, code in trees.items():
                command = [sys.executable, __file__, "--engine-times", "--nets", args.nets]
                command += ["--iterations", str(args.iterations), "--data-root", args.data_root]
                env = {**os.environ, "PYTHONPATH": str(code)}
                out = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
                for net, rows in json.loads(out.stdout.splitlines()[-1]).items():
                    for label, seconds in rows.items():
                        times.setdefault((net, label, tree), []).append(seconds)
    then, now = trees
    print(f"# Engines at {args.before} and now: {args.iterations} iterations, batch 128, ")
    print(f"{len(CONFIGS)} configs per net, medians of {args.repeats} alternating processes\n")
    print(f"| net | loop | s / 1000 it / model, {then} | now | now's speed vs {then} |")
    print("|---|---|---:|---:|---:|")
    for net, label in dict.fromkeys((n, lb) for n, lb, _ in times):
        a, b = (statistics.median(times[(net, label, t)]) for t in (then, now))
        per_k = 1000 / args.iterations
        print(f"| {net} | {label} | {a * per_k:.3f} | {b * per_k:.3f} | {a / b:.2f}x |")


def course(args) -> list[tuple[str, float, int]]:
    """Wall time of the whole course study end to end, as a user runs it (harness-train -m
    experiment=course, one seed: 27 runs of 20,000 iterations with their evaluations), with each
    engine; returns (engine, seconds, runs finished)."""
    commands = [
        ("stacked engine (the default)", []),
        ("single-run engine (hydra/launcher=parallel)", ["hydra/launcher=parallel"]),
    ]
    if args.course_stacked_only:
        commands = commands[:1]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, launcher in commands:
            folder = Path(tmp) / label.split()[0]
            cmd = [
                "harness-train",
                "-m",
                "experiment=course",
                "seed=0",
                *launcher,
                f"data.root={args.data_root}",
                f"hydra.sweep.dir={folder}",
            ]
            tic = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            seconds = time.perf_counter() - tic
            results.append((label, seconds, len(list(folder.rglob("run.json")))))
            print(f"course, {label}: {seconds:.0f} s", file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--iterations", type=int, default=500, help="steps per config (default 500)"
    )
    parser.add_argument("--nets", default="net1,net2,net3")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--data-root", default=DEFAULT_ROOT)
    parser.add_argument("--batches", type=int, default=500, help="batches per data-loading variant")
    parser.add_argument(
        "--repeats", type=int, default=3, help="medians of the two stacked paths (default 3)"
    )
    parser.add_argument(
        "--stacked-only", action="store_true", help="time the two stacked paths only"
    )
    parser.add_argument(
        "--course", action="store_true", help="also time the whole course study (minutes)"
    )
    parser.add_argument(
        "--course-stacked-only", action="store_true", help="course study: stacked engine only"
    )
    parser.add_argument("--before", help="time the engines of this git revision beside this tree's")
    parser.add_argument("--engine-times", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.before:
        return before_and_now(args)
    if args.engine_times:  # one process of --before: JSON on the last line of stdout
        # the configs of the tree whose harness is imported (PYTHONPATH)
        conf = Path(run_module.__file__).resolve().parents[1] / "conf"
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            times = {net: engine_times(args, net) for net in args.nets.split(",")}
        print(json.dumps(times))
        return None

    cores = os.cpu_count() or 1
    peak_all, peak_processes = matmul_peak(cores), matmul_peak_processes(cores)
    # The machine's measured peak: one large matmul on all threads, or one single-threaded
    # matmul per core at the same time (the layout of the stacked engine's workers); the larger.
    peak = max(peak_all, peak_processes)
    torch.set_num_threads(cores)
    print(f"# Speed: {args.iterations} iterations, batch 128, {len(CONFIGS)} configs per net")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"\ntorch {torch.__version__}, {cores} cores, device {device}; fp32 matmul (2048^2):")
    print(f"one matmul on {cores} threads: {peak_all:.0f} GFLOP/s; {cores} single-threaded")
    print(
        f"processes at once: {peak_processes:.0f} GFLOP/s in all. Peak used: {peak:.0f} GFLOP/s.\n"
    )
    data = load_mnist(args.data_root)
    x, y = data.x_train, data.y_train
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        versus = "the first stack" if args.stacked_only else "(a) (LeNet: (b))"
        print(
            f"| net | loop | s / 1000 it / model | speed-up vs {versus} | GFLOP/s | share of peak |"
        )
        print("|---|---|---:|---:|---:|---:|")
        for net in args.nets.split(","):
            for label, (s, ratio, gflops, share) in bench_net(args, net, peak, x, y).items():
                print(
                    f"| {net} | {label} | {s:.3f} | {ratio:.2f}x | {gflops:.1f} | {share:.0%} |",
                    flush=True,
                )

        if args.stacked_only:
            return
        torch.set_num_threads(os.cpu_count() or 1)
        print("\n| data loading (batch 128) | us / batch | s / 1000 batches |")
        print("|---|---:|---:|")
        for label, us in data_loading(x, y, args.batches):
            print(f"| {label} | {us:.0f} | {us / 1000:.3f} |", flush=True)

        if args.course:
            print(
                "\n| course study (27 runs x 20,000 it, evaluations every 500) | wall time | runs |"
            )
            print("|---|---:|---:|")
            for label, seconds, runs in course(args):
                print(
                    f"| {label} | {seconds / 60:.1f} min ({seconds:.0f} s) | {runs} |", flush=True
                )


if __name__ == "__main__":
    main()
