"""Tables computed once per report: inside `shared_results()`, an analysis function marked
`remembered` returns what it returned before for the same frames (the same objects) and the same
other arguments, instead of computing it again.

A zoo's report asks for the same tables many times over (the summary of every config 22 times,
each net's best configs by figure and by table). Outside the context nothing is kept, so a
notebook cell that changes a frame in place and asks again gets a new answer. Inside it, frames
are taken as read-only: the report never changes one in place, and each caller gets its own
shallow copy of a remembered frame (copy-on-write: changing that copy leaves the remembered one
as it was).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import pandas as pd

F = TypeVar("F", bound=Callable)

# (function, arguments) -> (the arguments, kept alive so that their frames' ids stay theirs;
# the result). None: no shared_results() is open.
_results: dict | None = None


@contextmanager
def shared_results() -> Iterator[None]:
    """Remember the results of `remembered` functions until the block ends (nested: the outer
    block's results are shared and kept until it ends)."""
    global _results
    outer = _results
    _results = {} if outer is None else outer
    try:
        yield
    finally:
        _results = outer


def _key_part(value) -> Hashable:
    """A frame by its identity; lists by their items; anything else as it is (hashable)."""
    if isinstance(value, (pd.DataFrame, pd.Series)):
        return ("frame", id(value))
    if isinstance(value, (list, tuple)):
        return tuple(_key_part(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _key_part(v)) for k, v in value.items()))
    return value


def _own_copy(value):
    """What a caller gets of a remembered result: frames shallow-copied, containers rebuilt."""
    if isinstance(value, (pd.DataFrame, pd.Series)):
        return value.copy(deep=False)
    if isinstance(value, tuple):
        return tuple(_own_copy(v) for v in value)
    if isinstance(value, list):
        return [_own_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _own_copy(v) for k, v in value.items()}
    return value


def remembered(function: F) -> F:
    """Mark an analysis function whose result depends only on its arguments (frames read, never
    changed): inside `shared_results()` it is computed once per frames and arguments."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if _results is None:
            return function(*args, **kwargs)
        key = (function.__qualname__, _key_part(args), _key_part(kwargs))
        try:
            hash(key)
        except TypeError:  # an argument that cannot be a key (a set, an array): computed
            return function(*args, **kwargs)
        if key not in _results:
            _results[key] = ((args, kwargs), function(*args, **kwargs))
        return _own_copy(_results[key][1])

    return wrapper  # type: ignore[return-value]
