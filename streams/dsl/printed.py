"""Printed (Kafka's Printed): where and how KStream.print writes each record, as the line
`[label]: key, value`. The label is the printed stream's node name unless `with_label` gives
one; `with_key_value_mapper(fn)` makes the text after the label `fn(key, value)`. Kafka's
default text formats None as null, as Java's String.format does."""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Optional, TextIO

from streams.dsl import naming as N
from streams.dsl.ops.stateless import PeekProcessor
from streams.errors import TopologyError

__all__ = ["Printed"]


def _text(item: Any) -> str:
    return "null" if item is None else str(item)


def _default_mapper(key: Any, value: Any) -> str:
    return f"{_text(key)}, {_text(value)}"


class _Output:
    """One destination shared by every task printing to it: whole lines under a lock. Standard
    output gets each line at once (looked up at each line, so a redirection made later holds);
    a file's lines are buffered and flushed when a printing processor closes (Kafka flushes
    System.out per line and a file's writer at close)."""

    def __init__(self, file: Optional[TextIO]) -> None:
        self.file = file
        self.lock = threading.Lock()

    def write_line(self, line: str) -> None:
        file = self.file
        with self.lock:
            if file is None:
                out = sys.stdout
                out.write(line + "\n")
                out.flush()
            else:
                file.write(line + "\n")

    def flush(self) -> None:
        if self.file is not None:
            with self.lock:
                self.file.flush()


class PrintProcessor(PeekProcessor):
    """KStream.print's processor (Kafka's KStreamPrint): each record as a line, nothing forwarded;
    a file's buffered lines flushed when it closes."""

    def __init__(self, action: Callable[[Any, Any], None], output: _Output) -> None:
        super().__init__(action, forward=False)
        self.output = output

    def close(self) -> None:
        self.output.flush()


class Printed:
    """Made by `Printed.to_sys_out()` or `Printed.to_file(path)`; the `with_*` methods return a
    changed copy."""

    __slots__ = ("_output", "label", "mapper", "processor_name")

    def __init__(self, output: _Output, label: Optional[str] = None,
                 mapper: Callable[[Any, Any], Any] = _default_mapper, processor_name: Optional[str] = None) -> None:
        if not isinstance(output, _Output):
            raise TopologyError("make a Printed with Printed.to_sys_out() or Printed.to_file(path)")
        self._output = output
        self.label = label
        self.mapper = mapper
        self.processor_name = processor_name

    @classmethod
    def to_sys_out(cls) -> "Printed":
        return cls(_Output(None))

    @classmethod
    def to_file(cls, file_path: str) -> "Printed":
        """Lines to `file_path`, created (or emptied) now, as Kafka opens it when the Printed is made."""
        if not isinstance(file_path, str) or not file_path.strip():
            raise TopologyError(f"Printed.to_file needs a file path, got {file_path!r}")
        try:
            file = open(file_path, "w", encoding="utf-8")  # noqa: SIM115 - kept open for the topology's life
        except OSError as exc:
            raise TopologyError(f"Unable to write stream to file at [{file_path}] {exc}") from None
        return cls(_Output(file))

    def with_label(self, label: str) -> "Printed":
        if not isinstance(label, str):
            raise TopologyError(f"Printed.with_label needs a string, got {label!r}")
        return Printed(self._output, label, self.mapper, self.processor_name)

    def with_key_value_mapper(self, mapper: Callable[[Any, Any], Any]) -> "Printed":
        N.check_fn(mapper, "Printed.with_key_value_mapper")
        return Printed(self._output, self.label, mapper, self.processor_name)

    def with_name(self, processor_name: str) -> "Printed":
        """Names the printing processor (Kafka's Printed.withName)."""
        return Printed(self._output, self.label, self.mapper, N.processor_name(processor_name, "Printed.with_name"))

    def processor(self, stream_name: str) -> PrintProcessor:
        """The printing processor of the stream `stream_name`."""
        label = self.label if self.label is not None else stream_name
        mapper, write_line = self.mapper, self._output.write_line

        def print_record(key: Any, value: Any) -> None:
            write_line(f"[{label}]: {_text(mapper(key, value))}")
        return PrintProcessor(print_record, self._output)
