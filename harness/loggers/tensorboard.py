"""TensorBoard: a run's metrics as scalars in an event folder of its own inside the run's folder
(`tensorboard --logdir results/<study>` shows a study's runs by their folders' names). A resumed
run writes a new event file into the same folder, from the step after the last one its earlier
files hold."""

from __future__ import annotations

import time
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
    """A run's event folder (`harness.loggers.Logger`), written with TensorBoard's own event
    writer and protos (torch's SummaryWriter would import torch into the logging process: half
    a GB and seconds, for the same records)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.writer: Any = None

    def open(self) -> dict[str, int]:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        last = logged_steps(self.folder) if self.folder.is_dir() else {}
        # flushed by `log`: the writer's own timer would only add a thread's wake-ups
        self.writer = EventFileWriter(str(self.folder), flush_secs=3600)
        return last

    def log(self, rows: Sequence[tuple[int, float, float, str, float]]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        now = time.time()
        for iteration, _, _, metric, value in rows:
            scalar = Summary(value=[Summary.Value(tag=metric, simple_value=float(value))])
            self.writer.add_event(Event(wall_time=now, step=int(iteration), summary=scalar))
        self.writer.flush()

    def _end(self, status: str) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self.writer.add_event(Event(wall_time=time.time(), summary=_text(STATUS_TAG, status)))
        self.writer.close()

    def finish(self, record: dict[str, Any]) -> None:
        self._end(record["status"])

    def abort(self, status: str) -> None:
        self._end(status)


def _text(tag: str, text: str):
    """A text summary, as TensorBoard's text dashboard reads one: a string tensor of one
    element under the text plugin."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData

    plugin = SummaryMetadata.PluginData(
        plugin_name="text", content=TextPluginData(version=0).SerializeToString()
    )
    tensor = TensorProto(
        dtype="DT_STRING",
        string_val=[text.encode()],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    value = Summary.Value(tag=f"{tag}/text_summary", tensor=tensor)
    value.metadata.CopyFrom(SummaryMetadata(plugin_data=plugin))
    return Summary(value=[value])
