"""User-facing errors: reported as one line on stderr, never as a traceback."""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
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


def run_reading(main: Callable[..., str], description: str, folders: dict[str, Path]) -> None:
    """The command line of a script that reads study folders and writes what it finds (the
    experiments' readings): `folders` are its positional arguments, each with its default;
    `main(*folders)`'s text is printed; a user's mistake (a folder that is not there, a table
    without what the reading needs) is one line on stderr and exit status 2."""
    prog = Path(sys.argv[0]).stem
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for name, default in folders.items():
        parser.add_argument(name, nargs="?", type=Path, default=default)
    args = parser.parse_args()
    try:
        print(main(*(getattr(args, name) for name in folders)))
    except (HarnessError, ValueError) as exc:  # a user's folder: one line, no traceback
        exit_with_error(prog, str(exc))
