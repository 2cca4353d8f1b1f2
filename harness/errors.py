"""User-facing errors: reported as one line on stderr, never as a traceback."""

import sys
from typing import NoReturn


class HarnessError(Exception):
    """A mistake in the user's input (config, data folder, paths) with a message that says how
    to fix it. Entry points print it as a single line and exit with status 2."""


class ConfigError(HarnessError):
    """An invalid configuration value."""


class DataError(HarnessError):
    """Missing, incomplete or corrupt data."""


def harness_error_in(exc: BaseException) -> HarnessError | None:
    """The HarnessError that `exc` wraps, if any: a resolver's error (`${tuned:...}`) reaches
    the caller inside OmegaConf's, with the key and the config around it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, HarnessError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def exit_with_error(prog: str, message: str) -> NoReturn:
    """Report a user mistake as one line on stderr and exit with status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(2)
