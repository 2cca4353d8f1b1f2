"""A stack's optimizers at run time: each model's optimizer steps its slice of the stacked tensors.

A model's update takes one of these paths (`StackedOptimizers.paths`, recorded in run.json as
`update_path`):

* ``stacked_rule``: the eight course optimizer classes in their default implementation are
  updated slice-wise by `RULES`, torch's single-tensor update rewritten with per-model
  [K, 1, 1] coefficients (one set of tensor operations for all models of a class; exact against
  torch.optim, see tests/test_stacked.py);
* ``torch_fused``: SGD, Adam, AdamW and Adagrad on models of >= 50,000 parameters step through
  torch's own fused implementation (one pass over memory; ~1e-7 from the default one in
  float32), in a stack on the CPU (on CUDA they take their stacked rule: see below);
* ``optimizer_step``: any other optimizer (RAdam, classes outside torch.optim, unusual settings)
  runs its own ``step()`` on its model's parameters, which are views of the stacked tensors.
  That is exact only if ``step()`` updates them in place: `stacking_refusal` checks it on a
  probe before a run joins a stack, and `StackedOptimizers.step` after every step;
* ``shared_step``: the seeds of one configuration (same optimizer, hyper-parameters and
  schedule) whose optimizer would run its own ``step()`` share one instance of it over their
  slice of the stacked tensors: one step for all of them. Exact for an optimizer whose update
  is element-wise; `sharing_refusal` checks it on a probe (one instance against one per model,
  a model dropped half-way) before they share.

A stack on CUDA steps its rules `capturable` (unless train.cuda_graph=off): each step's
per-model coefficients are rows of one tensor on the device, loaded once per step without a
synchronisation (`_DeviceCoefficients`), and the classes torch would fuse take their stacked
rule as well (one set of kernels for the slice instead of a fused kernel per model), so that the
rules' updates are device work alone, which a CUDA graph of the step can capture
(harness.stacking.cuda_graph). They are the rules' per-model tensor form, which a slice already
takes for the values its models do not share.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.errors import HarnessError
from harness.stacking.functional import StackedModule
from harness.stacking.mlp import StackedMLP
from harness.stacking.update_rules import (
    RULES,
    Coef,
    rule_key,
    use_fused,
)
from harness.training.restoring import load_optimizer_state
from harness.training.stepping import (
    SHARED_STEP,
    STACKED_RULE,
    failure_reason,
    in_train_mode,
    own_step_path,
)

OptimizerFactory = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]
# params -> (optimizer, its LR schedule), as a run's config builds them (building)
ScheduledFactory = Callable[[list[torch.nn.Parameter]], tuple[torch.optim.Optimizer, Any]]


@dataclass(frozen=True)
class Sharing:
    """What lets members of a stack share one optimizer instance: `config_id`, the identity of
    their configuration (runs with the same one are its seeds), and how to build its optimizer
    and schedule over their slice of the stacked tensors."""

    config_id: str
    build: ScheduledFactory


def _bc(values: Sequence[float], like: torch.Tensor) -> torch.Tensor:
    """Per-model scalars as a tensor that broadcasts against `like` ([K, ...])."""
    shape = (len(values),) + (1,) * (like.dim() - 1)
    return torch.tensor(values, dtype=like.dtype, device=like.device).view(shape)


def resliced(
    optimizer: torch.optim.Optimizer,
    params: Sequence[torch.nn.Parameter],
    tensors: Sequence[torch.Tensor],
    rows: Sequence[int],
    build: ScheduledFactory,
) -> tuple[list[torch.nn.Parameter], torch.optim.Optimizer, Any]:
    """A new instance and schedule (`build`) over `tensors`, the `rows` of the stacked tensors
    `params` were, carrying `optimizer`'s state over: a state tensor laid out like its
    parameter (first dimension the models) keeps the rows, any other state (a step count) is
    kept as it is; its groups' values (counters some optimizers keep there) too. Returns
    (parameters, optimizer, schedule)."""
    new_params = [torch.nn.Parameter(t) for t in tensors]
    fresh, schedule = build(new_params)
    index = torch.tensor(list(rows), device=tensors[0].device)
    for old, new in zip(params, new_params, strict=True):
        state = optimizer.state.get(old)
        if state:
            fresh.state[new] = {
                name: value[index]
                if isinstance(value, torch.Tensor)
                and value.dim() == old.dim()
                and value.shape[0] == old.shape[0]
                else value
                for name, value in state.items()
            }
    for old_group, group in zip(optimizer.param_groups, fresh.param_groups, strict=True):
        group.update({key: value for key, value in old_group.items() if key != "params"})
    return new_params, fresh, schedule


def still_views(param: torch.Tensor, data: torch.Tensor, grad: torch.Tensor) -> bool:
    """Whether `param` and its gradient are still views of `data` and `grad` (a step that
    updates in place keeps them so)."""
    return (
        param.data_ptr() == data.data_ptr()
        and param.grad is not None
        and param.grad.data_ptr() == grad.data_ptr()
    )


class _Coefficients:
    """One step's per-model scalars of a slice, as tensors broadcasting against [K, ...]."""

    def __init__(self, per_model: list[dict[str, float | None]]) -> None:
        self.per_model = per_model
        self.cache: dict[tuple[str, int], Coef | None] = {}

    def get(self, name: str, like: torch.Tensor) -> Coef | None:
        key = (name, like.dim())
        if key not in self.cache:
            first = self.per_model[0][name]
            values = None if first is None else [m[name] for m in self.per_model]
            if values is None or all(v == first for v in values):
                self.cache[key] = None if first is None else float(first)
            else:
                self.cache[key] = _bc(values, like)
        return self.cache[key]


class _DeviceCoefficients:
    """One step's per-model scalars of every rule slice of a stack as rows of one tensor on the
    stack's device, which the rules read through views (`getter`): a CUDA graph of the rules
    reads each step's values from it. Every value the first model of a slice has is a row of
    per-model values (the form `_Coefficients` gives values the models do not share)."""

    def __init__(self) -> None:
        self.layout: list[tuple[int, str, int]] = []  # (slice, name, models) of each row
        self.rows: dict[tuple[int, str], torch.Tensor] = {}
        self.flat = torch.empty(0)  # the rows, one after another

    def load(self, per_slice: dict[int, list[dict[str, float | None]]], like: torch.Tensor) -> bool:
        """Write one step's values (slice index -> per-model scalars); whether the rows were
        made again (other values in use, other slices): what reads the old ones must read anew."""
        layout = [
            (i, name, len(per_model))
            for i, per_model in per_slice.items()
            for name, value in per_model[0].items()
            if value is not None
        ]
        values = [float(m[name]) for i, name, _ in layout for m in per_slice[i]]
        remade = layout != self.layout
        if remade:
            flat = torch.empty(len(values), dtype=like.dtype, device=like.device)
            self.rows, start = {}, 0
            for i, name, models in layout:
                self.rows[(i, name)] = flat[start : start + models]
                start += models
            self.layout, self.flat = layout, flat
        # from pinned memory without waiting: the copy is ordered before the step that reads it
        on_cuda = like.device.type == "cuda"
        host = torch.tensor(values, dtype=like.dtype, pin_memory=on_cuda)
        self.flat.copy_(host, non_blocking=on_cuda)
        return remade

    def getter(self, index: int) -> Callable[[str, torch.Tensor], Coef | None]:
        """Slice `index`'s coefficient of a name, shaped to broadcast against `like` ([K, ...])."""

        def get(name: str, like: torch.Tensor) -> Coef | None:
            row = self.rows.get((index, name))
            return None if row is None else row.view(-1, *(1,) * (like.dim() - 1))

        return get


@dataclass
class _SharedInstance:
    """The one optimizer (and schedule) that steps the slice of a stack's tensors holding the
    seeds of one configuration, and the parameters it steps: aliases of that slice."""

    sharing: Sharing
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: Any


class StackedOptimizers:
    """Steps the optimizers of a stack's models: a slice of models that share a rule (see
    `rule_key`) is updated with one set of tensor operations; a slice of seeds of one
    configuration that may share an instance (`sharing`, per model: a `Sharing` or None) by
    one instance of their optimizer; other models by their own optimizer (whose parameters are
    views of the stack). `capturable` (a stack on CUDA): the rules read their coefficients from
    one tensor on the device (`_DeviceCoefficients`) and take torch's fused classes too.

    A step is `begin_step` (host: the step count, and a capturable stepper's coefficients),
    `update_rules` (the rule slices: device work alone where capturable, what a CUDA graph of
    the step captures) and `step_others` (every optimizer that runs its own step()); `step`
    is the three."""

    def __init__(
        self,
        stack: StackedMLP | StackedModule,
        optimizers: Sequence[torch.optim.Optimizer],
        sharing: Sequence[Sharing | None] | None = None,
        capturable: bool = False,
    ) -> None:
        self.stack = stack
        self.optimizers = list(optimizers)
        self.step_count = 0
        self.capturable = capturable
        self.coefficients = _DeviceCoefficients()
        self.remade = False  # whether the last begin_step made the coefficients' rows again
        keys = [rule_key(o, capturable) for o in self.optimizers]
        sharing = list(sharing or [None] * len(self.optimizers))
        # before any is set to fused
        fused = [not capturable and use_fused(o) for o in self.optimizers]
        for optimizer, fuse in zip(self.optimizers, fused, strict=True):
            if fuse:
                optimizer.param_groups[0]["fused"] = optimizer.defaults["fused"] = True
        # per slice: (start, stop, rule key); one state dict per stacked tensor and per model
        self.slices: list[tuple[int, int, tuple | None]] = []
        for k, (key, share) in enumerate(zip(keys, sharing, strict=True)):
            if key is None and share is not None:
                key = (SHARED_STEP, share.config_id)
            if key is not None and self.slices and self.slices[-1][2] == key:
                start, _, _ = self.slices[-1]
                self.slices[-1] = (start, k + 1, key)
            else:
                self.slices.append((k, k + 1, key))
        # a configuration with one seed here steps its own optimizer
        self.slices = [
            (start, stop, None if _shared(key) and stop - start == 1 else key)
            for start, stop, key in self.slices
        ]
        self.states: list[list[dict[str, torch.Tensor]]] = [
            [{} for _ in self._tensors()] for _ in self.slices
        ]
        self.extras: list[dict] = [{} for _ in self.optimizers]
        self.shared: dict[int, _SharedInstance] = {}  # slice start -> its instance
        tensors = self._tensors()
        for start, stop, key in self.slices:
            if _shared(key):
                share = sharing[start]
                params = [torch.nn.Parameter(p[start:stop]) for p, _ in tensors]
                optimizer, scheduler = share.build(params)
                if fused[start]:  # the seeds' own optimizers would step fused: so does theirs
                    optimizer.param_groups[0]["fused"] = optimizer.defaults["fused"] = True
                in_train_mode(optimizer)
                self.shared[start] = _SharedInstance(share, params, optimizer, scheduler)
                self._bind_gradients(start, stop)

    def _tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return self.stack.tensors()

    def _bind_gradients(self, start: int, stop: int) -> None:
        instance = self.shared[start]
        for param, (_, grad) in zip(instance.params, self._tensors(), strict=True):
            param.grad = grad[start:stop]

    def paths(self) -> list[str]:
        """Each model's update path in the stack: SHARED_STEP, STACKED_RULE, or its own step()
        (TORCH_FUSED where torch's fused implementation runs, else OPTIMIZER_STEP)."""
        return [
            _path(key, self.optimizers[k])
            for start, stop, key in self.slices
            for k in range(start, stop)
        ]

    def stepping(self) -> list[torch.optim.Optimizer]:
        """The optimizers that step: each shared instance once, every other model's own (the
        ones whose modes a stack switches, whose state is the models')."""
        return [
            self.shared[start].optimizer if start in self.shared else self.optimizers[k]
            for start, stop, _ in self.slices
            for k in ([start] if start in self.shared else range(start, stop))
        ]

    def optimizer_of(self, k: int) -> torch.optim.Optimizer:
        """The optimizer that steps model k (its own, or its seeds' shared instance)."""
        for start, stop, _ in self.slices:
            if start <= k < stop:
                return self.shared[start].optimizer if start in self.shared else self.optimizers[k]
        raise IndexError(k)

    def keep(self, kept: Sequence[int]) -> None:
        """Keep only the models at positions `kept` (call after the stack was restacked)."""
        states, slices, position, shared = [], [], 0, {}
        tensors = self._tensors()
        for (start, stop, key), state in zip(self.slices, self.states, strict=True):
            rows = [k - start for k in kept if start <= k < stop]
            if rows:
                index = torch.tensor(rows, device=tensors[0][0].device)
                states.append([{n: t[index] for n, t in st.items()} for st in state])
                slices.append((position, position + len(rows), key))
                if start in self.shared:
                    old = self.shared[start]
                    span = slice(position, position + len(rows))
                    params, optimizer, scheduler = resliced(
                        old.optimizer,
                        old.params,
                        [p[span] for p, _ in tensors],
                        rows,
                        old.sharing.build,
                    )
                    scheduler.load_state_dict(old.scheduler.state_dict())
                    in_train_mode(optimizer)  # as the probe does after its drop
                    if old.optimizer.defaults.get("fused"):
                        optimizer.param_groups[0]["fused"] = optimizer.defaults["fused"] = True
                    shared[position] = _SharedInstance(old.sharing, params, optimizer, scheduler)
                position += len(rows)
        self.slices, self.states, self.shared = slices, states, shared
        for start, stop, _ in self.slices:
            if start in self.shared:
                self._bind_gradients(start, stop)
        self.optimizers = [self.optimizers[k] for k in kept]
        self.extras = [self.extras[k] for k in kept]

    def state_dict(self) -> dict[str, Any]:
        """What the stepper itself carries: the stacked rules' states and per-model extras, its
        step count, and each shared instance's optimizer and schedule states (the models' own
        optimizers are the stack's to save)."""
        return {
            "step_count": self.step_count,
            "states": self.states,
            "extras": self.extras,
            "shared": {
                start: (instance.optimizer.state_dict(), instance.scheduler.state_dict())
                for start, instance in self.shared.items()
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from `state`, saved by a stepper of the same models (kept alike)."""
        self.step_count, self.extras = state["step_count"], state["extras"]
        device = self._tensors()[0][0].device
        self.states = [
            [{name: t.to(device) for name, t in st.items()} for st in slice_states]
            for slice_states in state["states"]
        ]
        if state["shared"].keys() != self.shared.keys():
            raise ValueError("the saved stepper shared other slices")
        for start, (optimizer, scheduler) in state["shared"].items():
            load_optimizer_state(self.shared[start].optimizer, optimizer)
            self.shared[start].scheduler.load_state_dict(scheduler)

    def _check_views(self, k: int) -> None:
        """After model k's own step(): its parameters must still be views of the stack, or its
        update went elsewhere and the stack would silently train something else."""
        if not all(still_views(p, data, grad) for p, data, grad in self.stack.views(k)):
            raise HarnessError(
                f"{type(self.optimizers[k]).__name__}.step() replaced its parameters' "
                "tensors in a stack, so it cannot train stacked; use train.engine=single"
            )

    def _check_shared_views(self, start: int, stop: int) -> None:
        instance = self.shared[start]
        pairs = zip(instance.params, self._tensors(), strict=True)
        if not all(still_views(p, data[start:stop], grad[start:stop]) for p, (data, grad) in pairs):
            raise HarnessError(
                f"{type(instance.optimizer).__name__}.step() replaced its parameters' tensors "
                "in a stack, so it cannot train stacked; use train.engine=single"
            )

    def restart(self) -> None:
        """Back to before the first step, for the rule slices (the only ones a CUDA graph probe
        steps): no step counted, no state, no per-model extras."""
        self.step_count = 0
        self.states = [[{} for _ in self._tensors()] for _ in self.slices]
        self.extras = [{} for _ in self.optimizers]

    def rule_states(self) -> list[torch.Tensor]:
        """The rule slices' state tensors, in a fixed order."""
        return [t for state in self.states for st in state for t in st.values()]

    def _scalars(self, start: int, stop: int) -> list[dict[str, float | None]]:
        """This step's scalars of each model of a rule slice (once per step: NAdam's extras
        keep a running product)."""
        _, scalars_of = RULES[type(self.optimizers[start])]
        return [
            scalars_of(o.param_groups[0], self.step_count, e)
            for o, e in zip(self.optimizers[start:stop], self.extras[start:stop], strict=True)
        ]

    def _ruled(self) -> list[tuple[int, int, int]]:
        """(slice index, start, stop) of the slices a stacked rule updates."""
        return [
            (i, start, stop)
            for i, (start, stop, key) in enumerate(self.slices)
            if key is not None and not _shared(key)
        ]

    def begin_step(self) -> None:
        """Count the step; a capturable stepper loads its coefficients (`remade` says whether
        their tensor was made again)."""
        self.step_count += 1
        if self.capturable:
            per_slice = {i: self._scalars(start, stop) for i, start, stop in self._ruled()}
            like = self._tensors()[0][0]
            self.remade = bool(per_slice) and self.coefficients.load(per_slice, like)

    @torch.no_grad()
    def update_rules(self) -> None:
        """Update the models of every rule slice (after `begin_step`)."""
        tensors = self._tensors()
        for i, start, stop in self._ruled():
            update, _ = RULES[type(self.optimizers[start])]
            if self.capturable:
                coefficient = self.coefficients.getter(i)
            else:
                coefficient = _Coefficients(self._scalars(start, stop)).get
            for (p, g), st in zip(tensors, self.states[i], strict=True):
                p, g = p[start:stop], g[start:stop]
                update(p, g, st, functools.partial(coefficient, like=p), self.step_count)

    @torch.no_grad()
    def step_others(self) -> dict[int, str]:
        """Step every optimizer that runs its own step() (and the shared instances'
        schedules); the models whose optimizer raised (position -> why, one line): their
        slices may be half-updated, the others' are not touched."""
        failed: dict[int, str] = {}
        for start, stop, key in self.slices:
            if start in self.shared:
                instance = self.shared[start]
                try:
                    instance.optimizer.step()
                except Exception as exc:  # noqa: BLE001 - the optimizer's result
                    failed |= dict.fromkeys(range(start, stop), failure_reason(exc))
                    continue
                self._check_shared_views(start, stop)
                instance.scheduler.step()
            elif key is None:
                for k in range(start, stop):
                    try:
                        self.optimizers[k].step()
                    except Exception as exc:  # noqa: BLE001 - the optimizer's result
                        failed[k] = failure_reason(exc)
                        continue
                    self._check_views(k)
        return failed

    def step(self) -> dict[int, str]:
        """Update every model (and step the shared instances' schedules): `begin_step`,
        `update_rules`, `step_others`; the models whose optimizer raised, as `step_others`."""
        self.begin_step()
        self.update_rules()
        return self.step_others()


def _path(key: tuple | None, optimizer: torch.optim.Optimizer) -> str:
    """The update path of a model in a slice of rule key `key` (see `StackedOptimizers`)."""
    if _shared(key):
        return SHARED_STEP
    if key is not None:
        return STACKED_RULE
    return own_step_path(optimizer)


def _shared(key: tuple | None) -> bool:
    return key is not None and key[0] == SHARED_STEP
