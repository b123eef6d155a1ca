"""How far each local store partition is behind its changelog (Kafka's
KafkaStreams.allLocalStorePartitionLags and LagInfo): what an instance answers to decide whether a
store it holds, active or standby, is fresh enough to query."""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

from confluent_kafka import TopicPartition

from state.restore import list_offsets
from streams.runtime.task import TaskState

#: Kafka's Task.LATEST_OFFSET: a running active task is at the end of its changelogs (it writes them)
_LATEST = -2


class LagInfo(NamedTuple):
    """A store partition's position in its changelog (the next offset it would read), the
    changelog's end offset, and the records between them (Kafka's LagInfo)."""

    current_offset_position: int
    end_offset_position: int

    @property
    def offset_lag(self) -> int:
        return max(0, self.end_offset_position - self.current_offset_position)


def local_store_partition_lags(threads: Iterable[Any], admin: Any, timeout_s: float = 10.0
                               ) -> dict[str, dict[int, LagInfo]]:
    """{store name: {partition: LagInfo}} of every store partition the stream threads hold, in
    active tasks (a running one is at the end of its changelogs; a restoring one where its
    restore is) and in standbys (where their updates are), against the changelogs' end offsets
    (one list_offsets request). A changelog not read from yet counts from 0, as Kafka's does."""
    positions: dict[tuple[str, int], int] = {}
    stores: dict[tuple[str, int], str] = {}
    for thread in threads:
        tm = thread.task_manager
        if tm is None:
            continue
        for task in [*tm.tasks.values(), *tm.standbys.values()]:
            manager = task.manager
            if manager is None:  # not initialized yet: its changelogs are not known here
                continue
            running = task.state is TaskState.RUNNING  # (a standby's states are of another kind)
            for tp, offset in manager.changelog_offsets().items():
                key = (tp.topic, tp.partition)
                stores[key] = manager.store_metadata(tp).store.name
                positions[key] = _LATEST if running else offset
    if not positions:
        return {}
    from confluent_kafka.admin import OffsetSpec

    ends = list_offsets(admin, [TopicPartition(t, p) for t, p in positions], OffsetSpec.latest(), timeout_s)
    lags: dict[str, dict[int, LagInfo]] = {}
    for key, end in sorted(ends.items()):
        position = positions[key]
        lags.setdefault(stores[key], {})[key[1]] = LagInfo(end if position == _LATEST else position, end)
    return dict(sorted(lags.items()))
