"""Checkpoints of a training in flight: what a killed sweep (a session's end, a SLURM time limit,
a lost machine) keeps of the stacks it was training.

A task of a sweep (a stack, or a run trained alone) saves its training's whole state every
`every_s` seconds of wall time, at a log point, into the sweep's ``.checkpoints`` folder:
the loop's records and counters, every model's weights, every optimizer's and schedule's state
(a stack's fused rules and shared instances included) and torch's random state. The same
command resumes the sweep: the launcher trains the runs of a checkpoint as the task they were
(`saved_tasks`), and the engine goes on from the saved step, as if never stopped.

That is exact only if an optimizer's `state_dict()` holds all it carries from step to step;
`restore_refusal` checks it on a probe, and a task with an optimizer that fails it trains
without checkpoints. A task's checkpoint is removed once its runs are written.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import OmegaConf

from harness.building import optimizer_factory
from harness.identity import config_hash
from harness.results import RUN_FILE
from harness.stepping import in_train_mode, needs_of, take_step

if TYPE_CHECKING:
    from harness.job import Job

log = logging.getLogger(__name__)

FOLDER = ".checkpoints"  # inside the sweep folder, beside the run folders
FORMAT = 1  # the saved state's layout; a checkpoint of another layout is not used


class Checkpoint:
    """Where a task saves its training's state, and how often: `due` at most every `every_s`
    seconds. `runs` are its runs' folder names and `hashes` their config hashes, in the order
    the task trains them; `stacked` says which engine trains it. A checkpoint found for other
    configs is not used."""

    def __init__(
        self,
        folder: Path,
        runs: Sequence[str],
        hashes: Sequence[str],
        stacked: bool,
        every_s: float,
    ) -> None:
        self.runs, self.hashes, self.stacked = list(runs), list(hashes), stacked
        self.every_s = every_s
        name = hashlib.sha256("\n".join(sorted(self.runs)).encode()).hexdigest()[:16]
        self.state_path = folder / f"{name}.pt"
        self.index_path = folder / f"{name}.json"  # written last: a checkpoint is complete
        self.opened = self.last_saved = time.monotonic()
        self.earlier_wall_s = 0.0  # wall time of the sittings before the one it goes on from

    def due(self) -> bool:
        return time.monotonic() - self.last_saved >= self.every_s

    def save(self, state: dict[str, Any]) -> None:
        """Write `state` (the engine's) atomically: a kill while writing leaves the last one."""
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        for path, write in (
            (self.state_path, lambda f: torch.save({"format": FORMAT, **state}, f)),
            (self.index_path, lambda f: f.write(json.dumps(self._index(state)).encode())),
        ):
            partial = path.with_name(path.name + ".partial")
            with open(partial, "wb") as f:
                write(f)
            os.replace(partial, path)
        self.last_saved = time.monotonic()

    def _index(self, state: dict[str, Any]) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "config_hashes": self.hashes,
            "stacked": self.stacked,
            "iteration": state["iteration"],
            "wall_s": self.earlier_wall_s + time.monotonic() - self.opened,
        }

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None: none saved, or saved for other configs or another layout
        (then training starts over, and the next save replaces it)."""
        if not self.index_path.exists() or not self.state_path.exists():
            return None
        index = json.loads(self.index_path.read_text())
        if index["runs"] != self.runs or index["config_hashes"] != self.hashes:
            log.warning("%s was saved for other configs: not used", self.state_path)
            return None
        state = torch.load(self.state_path, map_location="cpu", weights_only=False)
        if state.pop("format", None) != FORMAT:
            log.warning("%s has another layout: not used", self.state_path)
            return None
        log.info("going on from %s at step %d", self.state_path, state["iteration"])
        self.earlier_wall_s = index["wall_s"]
        return state

    def remove(self) -> None:
        _remove(self.index_path)


def _remove(index_path: Path) -> None:
    """Remove the checkpoint of `index_path`: its index, its state, and a save cut short."""
    for path in (index_path, index_path.with_suffix(".pt")):
        path.unlink(missing_ok=True)
        path.with_name(path.name + ".partial").unlink(missing_ok=True)


def task_checkpoint(jobs: Sequence[Job], stacked: bool, every_s: float | None) -> Checkpoint | None:
    """The checkpoint of a task that trains `jobs` of one sweep folder, in this order (None: it
    trains without: no interval given, or an optimizer that `restore_refusal` refuses)."""
    folders = {job.out_dir.parent for job in jobs}
    if every_s is None or len(folders) != 1:
        return None
    for job in jobs:
        reason = _refusal(job)
        if reason is not None:
            log.info("training without checkpoints: optimizer %s: %s", _target(job), reason)
            return None
    runs, hashes = [job.out_dir.name for job in jobs], [_hash(job) for job in jobs]
    return Checkpoint(folders.pop() / FOLDER, runs, hashes, stacked, every_s)


def saved_tasks(jobs: Sequence[Job]) -> list[tuple[list[int], bool, int]]:
    """The tasks of the checkpoints saved in the sweep folders of `jobs` whose runs are all among
    them, with the configs they were saved for: (positions in `jobs`, in the order the task
    trained them; stacked; the step it goes on from). A job is in one of them at most. A
    checkpoint whose runs were all written (a stop between writing them and removing it) is
    removed."""
    position = {(job.out_dir.parent, job.out_dir.name): i for i, job in enumerate(jobs)}
    tasks, taken = [], set()
    for sweep in sorted({job.out_dir.parent for job in jobs}):
        for index_path in sorted((sweep / FOLDER).glob("*.json")):
            index = json.loads(index_path.read_text())
            if all((sweep / name / RUN_FILE).exists() for name in index["runs"]):
                _remove(index_path)
                continue
            runs = [position.get((sweep, name)) for name in index["runs"]]
            if None in runs or taken & set(runs):
                continue
            if [_hash(jobs[i]) for i in runs] != index["config_hashes"]:
                continue
            taken |= set(runs)
            tasks.append((runs, bool(index["stacked"]), int(index["iteration"])))
    return tasks


def _hash(job: Job) -> str:
    return config_hash(OmegaConf.to_container(job.cfg, resolve=True))


def _target(job: Job) -> str:
    return str(job.cfg.optimizer.get("_target_"))


# restore_refusal's outcome per optimizer config and run length: probed once per sweep, where
# it is planned, and kept with its other probes (harness.planning) for its workers and resumes
_REFUSALS: dict[tuple[str, int], str | None] = {}


def probe(jobs: Sequence[Job]) -> None:
    """Probe the optimizer config of each of `jobs` (those not probed yet)."""
    for job in jobs:
        _refusal(job)


def probe_outcomes() -> dict[tuple[str, int], str | None]:
    return dict(_REFUSALS)


def adopt_probe_outcomes(outcomes: dict[tuple[str, int], str | None]) -> None:
    _REFUSALS.update(outcomes)


def _refusal(job: Job) -> str | None:
    node, iterations = job.cfg.optimizer, int(job.cfg.train.iterations or 0)
    key = (OmegaConf.to_yaml(node, resolve=True), iterations)
    if key not in _REFUSALS:
        _REFUSALS[key] = restore_refusal(optimizer_factory(node, iterations))
    return _REFUSALS[key]


def rng_state() -> dict[str, Any]:
    """torch's global random state (CPU, and CUDA where it is in use)."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """`optimizer.load_state_dict(saved)`, each state tensor in the dtype it was saved in: torch
    casts them to their parameter's (NAdam's float32 `mu_product` beside float64 weights would
    round differently from then on)."""
    optimizer.load_state_dict(saved)
    ids = [i for group in saved["param_groups"] for i in group["params"]]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    param_of = dict(zip(ids, params, strict=True))
    for key, values in saved["state"].items():  # a parameter's index, or a key of its own
        live = optimizer.state[param_of.get(key, key)]
        for name, value in values.items() if isinstance(values, dict) else ():
            if isinstance(value, torch.Tensor) and live[name].dtype != value.dtype:
                live[name] = value.to(live[name].device)


PROBE_STEPS = 6  # the probe's steps, half before its checkpoint and half after


def restore_refusal(make_optimizer: Callable[..., torch.optim.Optimizer]) -> str | None:
    """Why an optimizer `make_optimizer` builds would not go on exactly from a checkpoint (None:
    it would): on a probe in float64, PROBE_STEPS steps of one instance against half of them,
    its `state_dict()` written, read back and loaded into a new instance over the parameters'
    saved values, and the other half, torch's random state restored as the engine does. Each
    step is taken as the engine takes it (a closure, second-order backward: `take_step`). An
    optimizer that carries anything between steps outside its state_dict (an attribute of its
    own) differs."""
    generator = torch.Generator().manual_seed(4)
    shapes = ((3, 8), (2, 3), (2,))  # a hidden matrix, a head and its bias (Muon's split)
    start = [torch.randn(*s, dtype=torch.float64, generator=generator) for s in shapes]
    targets = [torch.randn(*s, dtype=torch.float64, generator=generator) for s in shapes]

    def build(values: list[torch.Tensor]) -> tuple[list[torch.nn.Parameter], Any]:
        params = [torch.nn.Parameter(v.clone()) for v in values]
        return params, in_train_mode(make_optimizer(params))

    def steps(params: list[torch.nn.Parameter], optimizer: Any, count: int) -> None:
        def loss() -> torch.Tensor:  # not a quadratic: curvature that moves
            gaps = [p - t for p, t in zip(params, targets, strict=True)]
            return sum((gap**2 * (1 + gap.abs())).sum() for gap in gaps)

        needs = needs_of(optimizer)
        for _ in range(count):
            take_step(optimizer, needs, loss)

    try:  # quietly: warnings of the probe's own steps (AdaHessian's create_graph) say nothing
        with torch.random.fork_rng(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(5)
            params, optimizer = build(start)
            steps(params, optimizer, PROBE_STEPS)
            straight = [p.detach().clone() for p in params]
            straight_attributes = _attributes(optimizer)

            torch.manual_seed(5)
            params, optimizer = build(start)
            steps(params, optimizer, PROBE_STEPS // 2)
            saved, random = _round_trip(optimizer.state_dict()), rng_state()
            values = [p.detach().clone() for p in params]
            torch.manual_seed(6)  # building may draw: the saved random state is what counts
            params, optimizer = build(values)
            load_optimizer_state(optimizer, saved)
            set_rng_state(random)
            steps(params, optimizer, PROBE_STEPS - PROBE_STEPS // 2)
    except Exception as exc:  # any failure on the probe: do not checkpoint it
        return f"it failed on the checkpoint probe ({type(exc).__name__}: {exc})"
    same = all(torch.equal(a, b.detach()) for a, b in zip(straight, params, strict=True))
    if not same or not _equal(straight_attributes, _attributes(optimizer)):
        return "it carries state between steps outside its state_dict()"
    return None


def _attributes(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's own values outside its state_dict (a step counter kept as an attribute,
    which may matter only after the probe's steps, as a step at which it does something)."""
    outside = {"state", "param_groups", "defaults"}
    return {
        name: value
        for name, value in vars(optimizer).items()
        if name not in outside
        and not name.startswith("_")
        and isinstance(value, int | float | str | torch.Tensor | None)
    }


def _equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
    )


def _round_trip(state: dict[str, Any]) -> dict[str, Any]:
    """`state` written and read back as a checkpoint is: copies, nothing shared with the
    instance that gave it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)
