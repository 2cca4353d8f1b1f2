"""Putting a training's state back as a checkpoint saved it (harness.training.checkpoint): torch's
random state, and an optimizer's state in the dtypes it was saved in. Here, apart from the
checkpoints' files, because the engine and the stacked rules restore with them."""

from __future__ import annotations

from typing import Any

import torch


def rng_state() -> dict[str, Any]:
    """torch's global random state (CPU, and the current GPU's where CUDA is in use)."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` returned."""
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])


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
        if isinstance(values, dict):
            for name, value in values.items():
                live[name] = _in_saved_dtypes(live[name], value)


def _in_saved_dtypes(live: Any, saved: Any) -> Any:
    """`live` (a loaded state value: a tensor, or lists and dicts of them, as torch casts them)
    with every tensor in the dtype `saved` has, on the device `live` has."""
    if isinstance(live, torch.Tensor) and isinstance(saved, torch.Tensor):
        return live if live.dtype == saved.dtype else saved.to(live.device)
    if isinstance(live, dict) and isinstance(saved, dict):
        return {k: _in_saved_dtypes(v, saved[k]) if k in saved else v for k, v in live.items()}
    if (
        isinstance(live, list | tuple)
        and isinstance(saved, list | tuple)
        and len(live) == len(saved)
    ):
        return type(live)(_in_saved_dtypes(a, b) for a, b in zip(live, saved, strict=True))
    return live
