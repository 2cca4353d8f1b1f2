"""The device a config names, made ready to compute the same bits on every run."""

from __future__ import annotations

import os

import torch

from harness.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """The device a config names (`auto`: a GPU where there is one); a GPU named where there is
    none is a one-line ConfigError. A CUDA device is made deterministic (`deterministic_cuda`)
    here, before this process runs anything on it."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name} but CUDA is not available here; use device=auto or cpu")
    if device.type == "cuda":
        deterministic_cuda()
    return device


# cuBLAS's workspace per stream: bitwise the same results on any stream (a CUDA graph captures
# on a stream of its own) and in any process. 4 MiB x 8 is torch's own size on Hopper GPUs.
CUBLAS_WORKSPACE = ":4096:8"


def deterministic_cuda() -> None:
    """Settings under which a CUDA step computes the same bits given the same inputs, in any
    process and on any stream: a fixed cuBLAS workspace per stream (read when a process first
    uses cuBLAS; worker processes inherit it) and cuDNN's deterministic algorithms (a torch.func
    stack's convolutions). Nothing is initialised on the device."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
