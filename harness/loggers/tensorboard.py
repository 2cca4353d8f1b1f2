"""TensorBoard: a run's metrics as scalars in an event folder of its own inside the run's folder
(`tensorboard --logdir results/<study>` shows a study's runs by their folders' names). A resumed
run writes a new event file into the same folder, from the step after the last one its earlier
files hold."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

STATUS_TAG = "status"  # a text summary: the run's status when it ended


def logged_steps(folder: Path) -> dict[str, int]:
    """The last step of each scalar tag in the event files of `folder`, read with TensorBoard's
    own loader (a file cut short by a kill ends where its last whole record does)."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event

    last: dict[str, int] = {}
    for path in sorted(Path(folder).glob("events.out.tfevents.*")):
        for raw in RawEventFileLoader(str(path)).Load():  # as written: no migration to tensors
            event = Event.FromString(raw)
            for value in event.summary.value:
                if value.HasField("simple_value"):  # the scalars `log` writes
                    last[value.tag] = max(last.get(value.tag, -1), int(event.step))
    return last


class TensorBoardLogger:
    """A run's event folder (`harness.loggers.Logger`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.writer: Any = None

    def open(self) -> dict[str, int]:
        from torch.utils.tensorboard import SummaryWriter

        last = logged_steps(self.folder) if self.folder.is_dir() else {}
        # flushed by `log`: the writer's own timer would only add a thread's wake-ups
        self.writer = SummaryWriter(str(self.folder), flush_secs=3600)
        return last

    def log(self, rows: Sequence[tuple[int, float, float, str, float]]) -> None:
        for iteration, _, _, metric, value in rows:
            self.writer.add_scalar(metric, value, iteration, new_style=False)
        self.writer.flush()

    def _end(self, status: str) -> None:
        self.writer.add_text(STATUS_TAG, status)
        self.writer.close()

    def finish(self, record: dict[str, Any]) -> None:
        self._end(record["status"])

    def abort(self, status: str) -> None:
        self._end(status)
