"""Memory a probe may allocate: no more than the machine has free.

An optimizer whose first step asks for more memory than the machine has (Kron's preconditioner
over a flattened weight: 25 GB on net2) would have the kernel kill the process, with no message.
Within `bounded()`, such an allocation fails instead (a RuntimeError or MemoryError the first-step
check reports in one line): the process's address space is capped, for the duration, at its
size plus the memory the machine has available. Where that cannot be read or set (not Linux),
nothing is capped.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]


def available_bytes() -> int | None:
    """The memory the machine has available (Linux's MemAvailable), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def address_space_bytes() -> int | None:
    """This process's address space (virtual size), or None."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def bounded() -> Iterator[None]:
    """Allocations beyond the memory the machine has free fail instead of the process dying."""
    available, size = available_bytes(), address_space_bytes()
    if resource is None or available is None or size is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + available
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
