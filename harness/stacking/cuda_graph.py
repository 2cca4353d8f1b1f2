"""A stack's training step on CUDA as one CUDA graph, where replaying it is exact.

On a GPU a stack's step is a train of small kernels (forward, backward, each slice's update),
each bound by its launch from Python. A stack on CUDA whose `train.cuda_graph` is `auto` (the
default) captures its step's device work once (`StepGraph`: the batch's rows and the per-step
coefficients, learning rates included, are read from tensors at fixed addresses) and replays it
at every step; what runs on the host stays outside: the step count, each step's coefficients
(computed from the optimizers' groups, as their schedules set them), every optimizer that runs
its own step(), the schedules, evaluations.

What is captured (`stack_refusal`, `member_refusal`):

* the forward and backward pass of a hand-written MLP stack (harness.stacking.mlp); a
  torch.func stack (any other model) is not captured: its backward runs autograd;
* the updates of the stacked rules (harness.stacking.update_rules: the course's eight classes),
  whose coefficients a capturable stepper reads from one device tensor. Any optimizer that runs its
  own step() (RAdam, every class outside torch.optim, the seeds' shared instances) keeps Python
  on the host at every step (a step count, a branch on a value, `.item()`) that a graph would
  replay frozen at the captured step: it steps eagerly after each replay, its forward and
  backward captured with the rest.

Before a stack trains, `probe` compares, bit for bit, a few steps of its eager execution with
the same steps replayed from a graph (losses, weights and the rules' states), from the stack's
first state (put back afterwards); where they differ, or the capture fails, the stack trains
eagerly. Bitwise, not within a tolerance: the eager steps and the replay run the same kernels on
the same values (a capturable stepper's eager steps read the same coefficient tensor), so any
difference means the replay runs something else (a value frozen into the graph, a branch taken
on the host), not rounding. A stack's results therefore do not depend on whether its graph is
used. Each run's `cuda_graph` in run.json says what happened (`notes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from harness.stacking.mlp import StackedMLP
from harness.training.stepping import STACKED_RULE, TORCH_FUSED

if TYPE_CHECKING:
    from harness.stacking.stack import Stack

# Eager steps before a capture, on the capture stream: a stacked rule makes its state (SGD's
# momentum buffer from the first gradient) at its first step, and cuBLAS its workspace.
WARMUP_STEPS = 1
# Steps of each of the probe's two trajectories: the warm-up, then replays whose coefficients
# (bias corrections) change at every step, as a frozen value would not.
PROBE_STEPS = 4

CAPTURED = "captured"


def stack_refusal(setting: str, members: Stack) -> str | None:
    """Why `members`' step is not captured at all (None: it may be, if the probe agrees)."""
    if setting == "off" or not members.stepper.capturable:
        return "train.cuda_graph=off"
    if not isinstance(members.stack, StackedMLP):
        return "a torch.func stack (its backward runs autograd) is not captured"
    return None


def member_refusal(path: str) -> str | None:
    """Why the update of a model with update path `path` stays outside its stack's graph (None:
    it is captured): only the stacked rules are device work alone."""
    if path == STACKED_RULE:
        return None
    if path == TORCH_FUSED:
        return "torch's fused step() reads its rate as a Python number at every step"
    return (
        "its own step() runs Python at every step (a step count, a branch on a value, "
        ".item()), which a graph would replay frozen"
    )


def notes(stack_reason: str | None, probe_reason: str | None, paths: Sequence[str]) -> list[str]:
    """Each model's `cuda_graph` note for run.json, one line: `captured`; `captured, its update
    eager (why)`; `eager (why the probe kept it so)`; `not captured (why)`."""
    if stack_reason is not None:
        return [f"not captured ({stack_reason})"] * len(paths)
    if probe_reason is not None:
        return [f"eager ({probe_reason})"] * len(paths)
    reasons = [member_refusal(path) for path in paths]
    return [CAPTURED if r is None else f"{CAPTURED}, its update eager ({r})" for r in reasons]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same bits (NaN where the other has the same NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))


def verdict(eager: Sequence[torch.Tensor], replayed: Sequence[torch.Tensor]) -> str | None:
    """Why a graph's trajectory is not the eager one (None: the same bits throughout): the
    probe's decision, given the two."""
    if len(eager) != len(replayed):
        return f"its replay left {len(replayed)} tensors, eager execution {len(eager)}"
    for i, (a, b) in enumerate(zip(eager, replayed, strict=True)):
        if not same_bits(a, b):
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"its replay's tensor {i} is {b.dtype}{list(b.shape)}, not as eager"
            gap = (a.double() - b.double()).abs().nan_to_num(nan=float("inf")).max().item()
            return f"its replay differs from eager execution (tensor {i}: max |diff| {gap:.3g})"
    return None


class StepGraph:
    """`step` (a stack's device work of one step: rows -> losses) replayed from a CUDA graph:
    WARMUP_STEPS eager calls on the capture stream, then a capture, then a replay per call. The
    rows are copied into the tensor the graph reads; the losses are the graph's output tensor,
    overwritten by the next replay. `reset` after the tensors the graph reads were made again
    (a model dropped, a checkpoint loaded)."""

    def __init__(self, step: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.step = step
        self.stream = torch.cuda.Stream()
        self.reset()

    def reset(self) -> None:
        if getattr(self, "graph", None) is not None:  # its last replay ends before it is freed
            torch.cuda.current_stream().synchronize()
        self.graph: torch.cuda.CUDAGraph | None = None
        self.rows: torch.Tensor | None = None
        self.losses: torch.Tensor | None = None
        self.warmups_left = WARMUP_STEPS

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        if self.graph is None and self.warmups_left > 0:
            self.warmups_left -= 1
            losses = self._on_stream(lambda: self.step(rows))
            losses.record_stream(torch.cuda.current_stream())  # made on the capture stream
            return losses
        if self.graph is None:
            self._capture(rows)
        self.rows.copy_(rows)
        self.graph.replay()
        return self.losses

    def _on_stream(self, work: Callable[[], torch.Tensor]) -> torch.Tensor:
        """`work` on the capture stream, ordered after and before the current stream's work."""
        current = torch.cuda.current_stream()
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            out = work()
        current.wait_stream(self.stream)
        return out

    def _capture(self, rows: torch.Tensor) -> None:
        self.rows = rows.clone()
        graph = torch.cuda.CUDAGraph()

        def captured() -> torch.Tensor:
            # torch.cuda.graph would also collect garbage and empty the cache: per capture,
            # and a stack is captured again after each drop
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                return self.step(self.rows)
            finally:
                graph.capture_end()

        self.losses = self._on_stream(captured)
        self.graph = graph


def probe_rows(
    n: int, batch: int, models: int, per_model: bool, device: torch.device
) -> list[torch.Tensor]:
    """PROBE_STEPS mini-batches of rows for a probe: ``[batch]`` shared by the models, or
    ``[models, batch]``, one per model, as the stack's steps take them."""
    base = torch.arange(batch)
    offsets = torch.arange(models).unsqueeze(1) * batch if per_model else 0
    return [((base + step * batch + offsets) % n).to(device) for step in range(PROBE_STEPS)]


Replay = Callable[[Callable[[torch.Tensor], torch.Tensor]], Callable[[torch.Tensor], torch.Tensor]]


def probe(members: Stack, rows: Sequence[torch.Tensor], replay: Replay = StepGraph) -> str | None:
    """Why replaying `members`' device step from a CUDA graph would not give its eager steps'
    bits (None: it gives them): from the stack's state before its first step, a step per
    entry of `rows` eagerly, then the same steps through `replay(device_step)` (a `StepGraph`:
    warm-up, capture, replays), each trajectory's losses, final weights and rule states compared
    by `verdict`. Neither the schedules nor the optimizers that run their own step() take part
    (they run eagerly either way). The stack is put back as it was."""
    weights = [tensor.clone() for tensor, _ in members.stack.tensors()]
    try:
        eager = _trajectory(members, rows, members.device_step)
        _rewind(members, weights)
        replayer = replay(members.device_step)
        try:
            replayed = _trajectory(members, rows, replayer)
        except RuntimeError as exc:  # an operation a capture does not allow
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return f"its capture failed: {first[:200]}"
        return verdict(eager, replayed)  # it waits for the replays: their graph is alive
    finally:
        _rewind(members, weights)


def _trajectory(
    members: Stack, rows: Sequence[torch.Tensor], step: Callable[[torch.Tensor], torch.Tensor]
) -> list[torch.Tensor]:
    losses = []
    for batch in rows:
        members.stepper.begin_step()
        losses.append(step(batch).clone())
    carried = [tensor for tensor, _ in members.stack.tensors()] + members.stepper.rule_states()
    return losses + [tensor.clone() for tensor in carried]


@torch.no_grad()
def _rewind(members: Stack, weights: Sequence[torch.Tensor]) -> None:
    """`members` back to their state before the first step: weights, zero gradients, no
    rule state or step count."""
    for (tensor, grad), saved in zip(members.stack.tensors(), weights, strict=True):
        tensor.copy_(saved)
        grad.zero_()
    members.stepper.restart()


def attach(members: Stack, setting: str, rows: Sequence[torch.Tensor]) -> list[str]:
    """Give `members` (a stack on CUDA, before its first step) a `StepGraph` where its setting
    allows one and the probe (on `rows`) finds it exact; each model's note for run.json."""
    reason = stack_refusal(setting, members)
    found = None if reason is not None else probe(members, rows)
    if reason is None and found is None:
        members.graph = StepGraph(members.device_step)
    return notes(reason, found, members.stepper.paths())
