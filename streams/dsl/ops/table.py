"""Table operators: KTable.to_stream(), written once as a stage."""

from __future__ import annotations

from typing import Any, Callable

from streams.dsl.change import Change
from streams.engine.stages import Stage, StageOperator
from streams.errors import ProcessingError


class ToStreamProcessor(StageOperator):
    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        def to_stream(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                if type(value) is not Change and not isinstance(value, Change):
                    raise ProcessingError(f"KTable.to_stream expected a table update (Change), got {value!r}")
                down(key, value.new_value, timestamp, headers)
            except BaseException:
                failed()
                raise
        return to_stream
