"""Run a study's consolidation or compaction and SIGKILL it at its K-th file operation.

    python tests/kill_at.py K collect|compact STUDY

The file operations counted are the ones a writer of a study's tables makes: writing a table
(Parquet, to its temporary name), renaming it into place, removing a file, making or removing
a folder. At a write, the process dies half-way through it (the temporary file cut to half its
length); at any other, just before it. Prints the number of operations and exits 0 when the
command ends before its K-th (K larger than its operations). Used by tests/test_integrity.py.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from harness import storage
from harness.results import collect

operations = 0
writing = False  # inside a counted write: pandas' to_parquet calls pyarrow's write_table


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _counted(real, writes: bool):
    def operation(*args, **kwargs):
        global operations, writing
        if writing:
            return real(*args, **kwargs)
        operations += 1
        if operations != kill_at:
            writing = writes
            try:
                return real(*args, **kwargs)
            finally:
                writing = False
        if not writes:
            _die()
        real(*args, **kwargs)
        # to_parquet(frame, path) or write_table(table, path): the temporary file, cut short
        path = Path(args[1])
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        _die()

    return operation


if __name__ == "__main__":
    kill_at, command, study = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    for name in ("replace", "unlink", "rmdir", "mkdir"):
        setattr(os, name, _counted(getattr(os, name), writes=False))
    pq.write_table = _counted(pq.write_table, writes=True)
    pd.DataFrame.to_parquet = _counted(pd.DataFrame.to_parquet, writes=True)
    (storage.compact if command == "compact" else collect)(study)
    print(operations)
