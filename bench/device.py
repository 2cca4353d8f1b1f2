"""The device benchmark: the harness's sweeps on a lent GPU, today's single-process eager path
beside the default one (stacks in worker processes sharing the GPU, each stack's step replayed
from a CUDA graph where that is exact), in one call that fits a lent device's time.

On the device, from the repository's root, in ONE call (its command):

    python bench/device.py --data-root <MNIST's four .gz files> --budget-s 420 --out $OUT

(there `python3`, with the harness's dependencies the image lacks installed first, as
results/zoo/h100/zoo_phase3_net3.sh does from carried wheels: hydra-core, omegaconf,
antlr4-python3-runtime, pytorch-optimizer, schedulefree). It spends about --budget-s seconds
(the sweeps' processes are stopped at the budget's end; a smaller budget trains shorter
fractions), plus Python's and torch's start and the device's own: 420 keeps it within 8 minutes.
Its parts, each printed and written out (device.md, device.json) as soon as it ends, so that a
call cut short keeps what it measured:

1. the device and its FP32 peak: one large float32 matrix product (TF32 off) measured here,
   beside a table of nominal peaks (`NOMINAL_FP32_TFLOPS`); every share below is of the
   measured peak;
2. stacked steps: a net3 stack of 64 course configs (one seed: one batch for all; 200 steps)
   and a net3 stack of 16 of the zoo's third-party optimizers that stack (50 steps), each
   trained in this process by today's path (`train.cuda_graph=off`: eager, torch's fused
   steps) and by the default (capturable rules, the step replayed from a CUDA graph): ms per
   step, TFLOP/s, share of the peak (the issue's target: >= 20 % for net3 stacks of 64);
3. determinism: a sweep of 12 net2 runs, its stacks trained in this process and in two worker
   processes sharing the GPU (the same stacks: max_stack), compared bit for bit; and against
   today's path (rounding only: the capturable rules compute with per-model coefficient
   tensors where today's use a Python number for a value the models share);
4. `experiment=lr_grid` end to end (810 runs x 4,000 iterations), whole `harness-train -m`
   processes: the default at 10 % of the iterations (the same 5 evaluations), today's path at
   2 %; then the default in full where its projection fits the budget left;
5. a slice of the zoo's phase 1 on net3: every 5th optimizer of the 122 that stack
   (results/zoo/h200/stackable.txt; `experiment=zoo_tune model=net3`, 10 trials each, no
   search beyond the edge: 250 runs of 2,000 iterations), likewise, and phase 1's 1,220
   stackable net3 runs projected from it (times their number over the slice's).

A fraction's projection to the full length, stated in the tables: one process, its wall time
plus its stacks' optimisation time times (full / fraction - 1) (evaluations and start-up do
not grow with the length); the default, the same with that time shared by its worker processes
(divided by their number). Whole processes are timed from their start to their end, results
consolidated: what a user waits for.

    python bench/device.py --smoke --out /tmp/device-smoke   # on a CPU: every part, tiny

`--smoke` runs every part on the CPU at tiny sizes (the lr_grid's and zoo's axes cut down, a
few thousand images, tens of steps): a check of the script, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this tree's harness, installed or not

import pandas as pd  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from harness.config.devices import resolve_device  # noqa: E402
from harness.stacking.stack import train_stack  # noqa: E402
from harness.sweeps.plan import execute_jobs  # noqa: E402
from harness.training import first_step  # noqa: E402
from harness.training import run as run_module  # noqa: E402
from harness.training.job import Job  # noqa: E402

DEFAULT_ROOT = os.environ.get("HARNESS_DATA_ROOT", str(REPO.parent / "shared" / "data" / "mnist"))
# Nominal FP32 (non-tensor) peaks, TFLOP/s, by a part of the name torch reports: for reference
# beside the measured one. The H200 has the H100 SXM's compute.
NOMINAL_FP32_TFLOPS = {
    "H100 PCIe": 51.2,
    "H100 NVL": 60.0,
    "H100": 66.9,
    "H200": 66.9,
    "A100": 19.5,
    "L40S": 91.6,
    "L4": 30.3,
}
STACKABLE = REPO / "results" / "zoo" / "h200" / "stackable.txt"
COURSE = {"sgd", "momentum", "nesterov", "adagrad", "adadelta", "rmsprop", "adam", "adamax"}
COURSE |= {"nadam", "adamw", "radam", "yellowfin"}
LR_GRID = {"runs": 810, "iterations": 4000}
ZOO_NET3 = {"runs": 1220, "iterations": 2000}  # phase 1's stackable net3 runs (the issue's)
SMOKE_DATA = ["data.train_size=2000", "data.test_size=500", "train.eval_train_size=500"]

log = logging.getLogger("bench.device")


class Budget:
    """The seconds left of --budget-s."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.start = seconds, time.perf_counter()

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)


class Report:
    """What the parts found, written (Markdown and JSON) after each part."""

    def __init__(self, out: Path) -> None:
        self.out, self.data, self.sections = out, {}, {}
        out.mkdir(parents=True, exist_ok=True)

    def add(self, key: str, data: Any, markdown: str) -> None:
        """Part `key`'s findings (again, where it measured more), printed and written."""
        self.data[key], self.sections[key] = data, markdown
        print(markdown + "\n", flush=True)
        (self.out / "device.json").write_text(json.dumps(self.data, indent=1, default=str))
        (self.out / "device.md").write_text("\n\n".join(self.sections.values()) + "\n")


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


# --- 1. the device and its peak ------------------------------------------------------------


def measured_peak(device: torch.device, n: int, repeats: int = 10) -> float:
    """TFLOP/s of an n x n x n float32 matrix product (TF32 off): the median of `repeats`."""
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = (torch.randn(n, n, device=device) for _ in range(2))
    seconds = []
    for _ in range(repeats + 2):
        synchronize(device)
        tic = time.perf_counter()
        a @ b
        synchronize(device)
        seconds.append(time.perf_counter() - tic)
    return 2 * n**3 / statistics.median(seconds[2:]) / 1e12


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def describe_device(device: torch.device, smoke: bool) -> dict[str, Any]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    nominal = next((v for k, v in NOMINAL_FP32_TFLOPS.items() if k in name), None)
    found = {
        "name": name,
        "torch": torch.__version__,
        "cores": os.cpu_count(),
        "nominal_fp32_tflops": nominal,
        "measured_fp32_tflops": measured_peak(device, 1024 if smoke else 8192),
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        found |= {
            "memory_gib": properties.total_memory / 2**30,
            "sms": properties.multi_processor_count,
        }
    return found


# --- configs and runs ------------------------------------------------------------------------


def configs(overrides: list[list[str]], common: list[str]) -> list:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return [compose("config", [*common, *o]) for o in overrides]


def flops_of(config: dict) -> float:
    """FLOPs of a run's training steps, from its run.json config."""
    cfg = OmegaConf.create(config)
    return Job.of(cfg, "unused").problem.flops(cfg) * cfg.train.iterations


def graph_note(note: str | None) -> str:
    """A run's cuda_graph note without its reason (no note: not on CUDA)."""
    return "-" if note is None else note.split(" (")[0]


def stack_seconds(records: list[dict]) -> float:
    """Optimisation seconds of a sweep's stacks and single runs (a stack's once)."""
    stacks = {r["train_time_s"] for r in records if r["engine"] == "stacked"}
    return sum(stacks) + sum(r["train_time_s"] for r in records if r["engine"] == "single")


# --- 2. stacked steps -----------------------------------------------------------------------


def stack_step(cfgs: list, setting: str) -> dict[str, Any]:
    """One stack of `cfgs` trained in this process with train.cuda_graph=`setting`: seconds per
    step (optimisation only), its FLOP/s, how each model's step ran."""
    for cfg in cfgs:
        cfg.train.cuda_graph = setting
    runs = [run_module.prepare(Job.of(cfg, "unused")) for cfg in cfgs]
    outcomes = train_stack(runs)
    steps = cfgs[0].train.iterations
    step_s = outcomes[0].train_time_s / steps
    flops = sum(Job.of(c, "unused").problem.flops(c) for c in cfgs)
    return {
        "models": len(cfgs),
        "ms_per_step": step_s * 1e3,
        "tflops": flops / step_s / 1e12,
        "statuses": dict(Counter(o.status for o in outcomes)),
        "cuda_graph": dict(Counter(graph_note(o.cuda_graph) for o in outcomes)),
        "update_paths": dict(Counter(o.update_path for o in outcomes)),
    }


def course_stack(k: int) -> list[list[str]]:
    """k configs of the course's optimizers at rates of lr_grid's range that do not diverge in
    a few hundred steps (the stack keeps its size), one seed (one batch for all)."""
    optimizers = ["sgd", "momentum", "nesterov", "adagrad", "adadelta", "rmsprop", "adam"]
    optimizers += ["adamax", "nadam"]
    rates = ["1e-4", "2e-4", "5e-4", "1e-3", "2e-3", "5e-3", "1e-2", "2e-2"]
    grid = [[f"optimizer={o}", f"optimizer.lr={lr}"] for lr in rates for o in optimizers]
    return grid[:k]


def third_party(k: int) -> list[str]:
    names = STACKABLE.read_text().strip().split(",")
    return [n for n in names if n not in COURSE][:k]


def part_stacks(args, device: str, peak: float, report: Report) -> None:
    """The course stack and the third-party stack, each by both paths (see the module)."""
    scale = 0.02 if args.smoke else min(1.0, args.budget_s / 420)
    k, third = (4, 4) if args.smoke else (64, 16)
    stacks = {  # label -> (overrides of each model, steps: a third-party step costs more)
        f"net3, {k} course configs": (course_stack(k), max(5, int(200 * scale))),
        f"net3, {third} third-party optimizers": (
            [[f"optimizer={name}"] for name in third_party(third)],
            max(5, int(50 * scale)),
        ),
    }
    found, rows = {}, []
    for label, (overrides, steps) in stacks.items():
        common = [f"data.root={args.data_root}", f"device={device}", "model=net3", "seed=0"]
        common += [f"train.iterations={steps}", f"train.eval_every={steps}", "train.log_every=1"]
        common += ["train.progress=false", *(SMOKE_DATA if args.smoke else [])]
        for setting, path in (("off", "today's path (eager)"), ("auto", "default (CUDA graph)")):
            measured = stack_step(configs(overrides, common), setting)
            found[f"{label}: {path}"] = measured | {"steps": steps}
            rows.append(
                [
                    label,
                    path,
                    f"{steps}",
                    f"{measured['ms_per_step']:.3g}",
                    f"{measured['ms_per_step'] / measured['models']:.3g}",
                    f"{measured['tflops']:.3g}",
                    f"{measured['tflops'] / peak:.1%}",
                    ", ".join(f"{n} {k}" for k, n in measured["cuda_graph"].items()),
                ]
            )
    header = ["stack", "path", "steps", "ms / step", "ms / step / model", "TFLOP/s", "of peak"]
    text = "## Stacked steps (optimisation only: evaluations excluded)\n\n"
    report.add("stacks", found, text + table([*header, "graph"], rows))


# --- 3. determinism ---------------------------------------------------------------------------


def part_determinism(args, device: str, report: Report) -> None:
    optimizers = ["adam", "sgd", "momentum", "rmsprop", "lion", "adan"]
    variants = [[f"optimizer={o}", f"seed={s}"] for o in optimizers for s in (1, 2)]
    steps = 20 if args.smoke else 100
    common = [f"data.root={args.data_root}", f"device={device}", "model=net2"]
    common += ["train.progress=false", f"train.iterations={steps}", "train.log_every=10"]
    common += [f"train.eval_every={steps // 2}"] + (SMOKE_DATA if args.smoke else [])

    def trained(folder: Path, use_workers: bool, setting: str) -> list[pd.DataFrame]:
        cfgs = configs(variants, [*common, f"train.cuda_graph={setting}"])
        jobs = [Job.of(cfg, folder / str(i)) for i, cfg in enumerate(cfgs)]
        for job in jobs:  # as the launcher does: each plan is dealt by the same step times
            run_module.check(job)
        execute_jobs(jobs, workers=2, use_workers=use_workers, max_stack=6)
        return [pd.read_parquet(j.out_dir / "metrics.parquet").drop(columns="time_s") for j in jobs]

    with tempfile.TemporaryDirectory() as tmp:
        here = trained(Path(tmp) / "here", False, "auto")
        workers = trained(Path(tmp) / "workers", True, "auto")
        today = trained(Path(tmp) / "today", False, "off")
    same = sum(a.equals(b) for a, b in zip(here, workers, strict=True))
    gaps = [
        (a.value - b.value).abs().max()
        for a, b in zip(here, today, strict=True)
        if len(a) == len(b)
    ]
    gap = float(max(gaps)) if gaps else None
    found = {
        "runs": len(here),
        "bitwise_equal_here_and_in_workers": same,
        "max_abs_difference_from_todays_path": gap,
    }
    text = (
        f"## Determinism ({len(here)} net2 runs x {steps} steps, 6 per stack)\n\n"
        f"- in this process and in 2 worker processes, the same stacks: {same} of {len(here)} "
        "runs' metrics bit for bit equal\n"
        "- the default against today's path: max |difference| of any recorded value "
        + (f"{gap:.3g} (rounding)" if gap is not None else "n/a (no run of equal length)")
    )
    report.add("determinism", found, text)


# --- 4, 5. whole sweeps ------------------------------------------------------------------------

DEFAULT = "default (workers, CUDA graphs)"
TODAY = "today's path (one process, eager)"
TODAYS_SETTINGS = ["train.cuda_graph=off", "hydra.launcher.use_workers=false"]


def sweep(overrides: list[str], folder: Path, timeout: float) -> dict[str, Any] | None:
    """`harness-train -m <overrides>` into `folder`, a whole process: its wall time, its runs'
    records and its worker processes; None if it did not end within `timeout` seconds (it is
    stopped with its workers)."""
    command = [sys.executable, "-c", "from harness.cli import train; train()", "-m", *overrides]
    command += [f"hydra.sweep.dir={folder}", "train.progress=false"]
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    tic = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        cwd=REPO,
        start_new_session=True,  # its workers too are stopped on a timeout
    )
    try:
        output, _ = process.communicate(timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        log.warning("stopped after %.0f s: %s", timeout, " ".join(overrides))
        return None
    wall = time.perf_counter() - tic
    if process.returncode != 0:
        raise RuntimeError(f"harness-train failed ({process.returncode}): {output[-3000:]}")
    workers = re.search(r"in (\d+) worker processes", output)
    return {
        "wall_s": wall,
        "records": [json.loads(p.read_text()) for p in folder.rglob("run.json")],
        "workers": int(workers.group(1)) if workers else 1,
    }


def projected(found: dict[str, Any], length: int, full: int) -> float:
    """The wall time of the same sweep at `full` iterations from one at `length` (see the
    module): its stacks' optimisation time grows with the length, shared by its workers."""
    grows = stack_seconds(found["records"]) * (full / length - 1)
    return found["wall_s"] + grows / found["workers"]


def summary(found: dict[str, Any], length: int, full: int, peak: float) -> dict[str, Any]:
    records = found["records"]
    seconds = found["wall_s"] if length == full else projected(found, length, full)
    flops = sum(flops_of(r["config"]) for r in records) * full / length
    return {
        "runs": len(records),
        "iterations": length,
        "wall_s": found["wall_s"],
        "full_s": seconds,
        "measured_in_full": length == full,
        "workers": found["workers"],
        "tflops": flops / seconds / 1e12,
        "of_peak": flops / seconds / 1e12 / peak,
        "statuses": dict(Counter(r["status"] for r in records)),
        "cuda_graph": dict(Counter(graph_note(r.get("cuda_graph")) for r in records)),
    }


def length_of(full: int, fraction: float) -> int:
    """`fraction` of `full` iterations, a multiple of 40 (log_every 10, evaluations every
    quarter: the same 5 evaluations as the full length)."""
    return max(40, int(full * fraction) // 40 * 40)


def lengths(length: int) -> list[str]:
    return [f"train.iterations={length}", f"train.eval_every={length // 4}"]


class Sweep:
    """One sweep of the benchmark (lr_grid, the zoo's slice): its overrides, full length, the
    fraction each path trains in this call, and its section of the report."""

    def __init__(self, key: str, title: str, overrides: list[str], full: int, scale: float = 1):
        self.key, self.title, self.overrides, self.full = key, title, overrides, full
        self.scale = scale  # the full study's runs over this sweep's
        self.fractions: dict[str, float] = {}
        self.found: dict[str, Any] = {}

    def run(self, label: str, length: int, budget: Budget, reserve: float, peak: float) -> bool:
        """Train path `label` at `length` iterations within the budget left but `reserve`
        seconds; whether it ended in time."""
        extra = TODAYS_SETTINGS if label == TODAY else []
        timeout = budget.left() - reserve
        with tempfile.TemporaryDirectory() as tmp:
            found = sweep([*self.overrides, *extra, *lengths(length)], Path(tmp), timeout)
        if found is None:
            self.found.setdefault(label, {"timed_out_after_s": timeout, "iterations": length})
            return False
        self.found[label] = summary(found, length, self.full, peak)
        return True

    def rows(self) -> list[list[Any]]:
        rows = []
        for label, f in self.found.items():
            if "timed_out_after_s" in f:
                stopped = f"stopped after {f['timed_out_after_s']:.0f} s"
                rows.append([label, "", f"{f['iterations']} it: {stopped}", "", "", "", ""])
                continue
            how = "measured" if f["measured_in_full"] else f"projected from {f['iterations']} it"
            rows.append(
                [
                    label,
                    f"{f['runs']}",
                    f"{f['wall_s']:.0f} s at {f['iterations']} it",
                    f"**{f['full_s'] * self.scale:.0f} s** ({how})",
                    f"{f['workers']}",
                    f"{f['tflops']:.3g} ({f['of_peak']:.1%})",
                    ", ".join(f"{n} {k}" for k, n in f["cuda_graph"].items()),
                ]
            )
        return rows

    def write(self, report: Report) -> None:
        header = ["path", "runs", "this call", "in full", "workers", "TFLOP/s (of peak)", "graph"]
        report.add(self.key, self.found, f"## {self.title}\n\n" + table(header, self.rows()))


def sweeps(args) -> list[Sweep]:
    """lr_grid and the zoo's slice, each with its paths' fractions (tiny with --smoke)."""
    common = [f"data.root={args.data_root}"]
    if args.smoke:
        common += ["device=cpu", *SMOKE_DATA]
    grid = ["experiment=lr_grid", *common]
    if args.smoke:
        grid += ["model=net1", "optimizer=sgd,adam", "optimizer.lr=0.01,0.1", "seed=0,1"]
    lr_grid = Sweep(
        "lr_grid",
        f"experiment=lr_grid end to end ({LR_GRID['runs']} runs x {LR_GRID['iterations']:,} "
        "iterations)",
        grid,
        LR_GRID["iterations"],
    )
    names = STACKABLE.read_text().strip().split(",")
    chosen = names[::5][:2] if args.smoke else names[::5]
    zoo = ["experiment=zoo_tune", "model=net3", f"optimizer={','.join(chosen)}", *common]
    zoo += ["tune.beyond_edge=null"] + (["tune.budget=2"] if args.smoke else [])
    runs = len(chosen) * (2 if args.smoke else 10)
    slice_ = Sweep(
        "zoo",
        f"The zoo's phase 1 on net3: {runs} runs of every 5th of its optimizers that stack "
        f"({ZOO_NET3['iterations']:,} iterations), 'in full' projected to its "
        f"{ZOO_NET3['runs']:,} stackable runs (x {ZOO_NET3['runs'] / runs:.2f})",
        zoo,
        ZOO_NET3["iterations"],
        ZOO_NET3["runs"] / runs,
    )
    scale = min(1.0, args.budget_s / 420)  # a smaller budget: shorter fractions
    lr_grid.fractions = {DEFAULT: 0.1 * scale, TODAY: 0.02 * scale}
    slice_.fractions = {DEFAULT: 0.1 * scale, TODAY: 0.02 * scale}
    if args.smoke:  # the shortest: 40 iterations
        lr_grid.fractions = slice_.fractions = {DEFAULT: 0.0, TODAY: 0.0}
    return [lr_grid, slice_]


RESERVE_S = 40  # left for each sweep run still to come, when one starts


def part_sweeps(args, budget: Budget, peak: float, report: Report) -> None:
    """Every sweep's paths at their fractions first (each leaving RESERVE_S for each run still
    to come), then each default in full, where its projection fits the time left."""
    plan = [(s, label, f) for s in sweeps(args) for label, f in s.fractions.items()]
    for n, (s, label, fraction) in enumerate(plan):
        s.run(label, length_of(s.full, fraction), budget, RESERVE_S * (len(plan) - n - 1), peak)
        s.write(report)
    for s in dict.fromkeys(s for s, _, _ in plan):
        found = s.found.get(DEFAULT, {})
        fits = found.get("measured_in_full") is False and 1.2 * found["full_s"] < budget.left()
        if fits and s.run(DEFAULT, s.full, budget, 0, peak):
            s.write(report)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-root", default=DEFAULT_ROOT, help="MNIST's four .gz files")
    parser.add_argument("--budget-s", type=float, default=420, help="device seconds to spend")
    parser.add_argument("--out", type=Path, help="default: results/devices/<device name>/")
    parser.add_argument("--smoke", action="store_true", help="every part on the CPU, tiny")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    budget = Budget(args.budget_s)
    device = "cpu" if args.smoke else "cuda"
    resolved = resolve_device(device)  # before anything runs on it (deterministic cuBLAS)
    # the first-step checks of this process time a few steps, not up to a second each: their
    # timings only plan sweeps, and the device's time is the budget's
    first_step.TIMED_STEPS, first_step.CALIBRATION_S = 3, 0.0
    described = describe_device(resolved, args.smoke)
    out = args.out or REPO / "results" / "devices" / slug(described["name"])
    report = Report(out)
    peak = described["measured_fp32_tflops"]
    row = [described["name"], described["torch"], described["cores"], f"{peak:.3g} TFLOP/s"]
    row.append(f"{described['nominal_fp32_tflops'] or '?'} TFLOP/s")
    header = ["device", "torch", "cores", "FP32 peak, measured", "nominal"]
    title = f"# Device benchmark: {described['name']} (bench/device.py)\n\n"
    report.add("device", described, title + table(header, [row]))
    part_stacks(args, device, peak, report)
    part_determinism(args, device, report)
    part_sweeps(args, budget, peak, report)
    print(f"written to {out} after {args.budget_s - budget.left():.0f} s", flush=True)


if __name__ == "__main__":
    main()
