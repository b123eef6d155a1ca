"""Kafka Streams' metrics: `Metric(name, group, tags, value)` and a registry of sensors.

Cost model. Recording is an integer increment on a sensor's slot (`sensor.count += n`, or
`sensor.record(n)`); a latency sensor adds one sum and one max. Everything else happens when the
metrics are read: rates, averages and maxima are measured over the window between snapshots the
registry takes on read, like Kafka's sampled stats (`metrics.sample.window.ms` = 30 s,
`metrics.num.samples` = 2). Kafka's Rate divides by the elapsed time since the oldest sample,
stretched to at least (samples - 1) full windows so a young sensor does not report a spike; the
same rule is applied here, with the sensor's creation as its first sample.

Names, groups and tags are Kafka's; the helpers at the bottom make the ones Eddy reports
(dropped-records, process, commit latency, restore, records-lag-max, client and thread state).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable, NamedTuple, Optional

__all__ = [
    "Metric", "Sensor", "LatencySensor", "Counter", "MetricsRegistry",
    "TASK_GROUP", "THREAD_GROUP", "STATE_GROUP", "CLIENT_GROUP", "CONSUMER_FETCH_GROUP",
    "task_dropped_records_sensor", "task_enforced_processing_sensor", "task_process_sensor",
    "task_input_buffer_bytes_gauge",
    "thread_process_sensor", "thread_commit_sensor",
    "store_restore_sensors", "records_lag_max_gauge", "client_state_gauge", "thread_state_gauge",
]

TASK_GROUP = "stream-task-metrics"
THREAD_GROUP = "stream-thread-metrics"
STATE_GROUP = "stream-state-metrics"
CLIENT_GROUP = "stream-metrics"
CONSUMER_FETCH_GROUP = "consumer-fetch-manager-metrics"

DEFAULT_SAMPLE_WINDOW_MS = 30_000
DEFAULT_NUM_SAMPLES = 2


class Metric(NamedTuple):
    name: str
    group: str
    tags: dict
    value: Any


def _wall_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Sensor:
    """Counts events: exposes `<name>-total` and `<name>-rate` (per second)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def record(self, n: int = 1) -> None:
        self.count += n


class LatencySensor:
    """Times an operation: `<name>-latency-avg`, `<name>-latency-max` (ms), `<name>-rate`, `<name>-total`."""

    __slots__ = ("count", "sum", "max")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.max = -math.inf

    def record(self, latency_ms: float) -> None:
        self.count += 1
        self.sum += latency_ms
        if latency_ms > self.max:
            self.max = latency_ms


class Counter:
    """A cumulative value that may also go down (e.g. restore-remaining-records-total)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def record(self, n: int = 1) -> None:
        self.value += n


class _Entry:
    """A registered sensor and its read-time snapshots [(time, count, sum, max since previous)]."""

    __slots__ = ("name", "group", "tags", "sensor", "snapshots", "supplier")

    def __init__(self, name: str, group: str, tags: dict, sensor: Any, now: int, supplier=None) -> None:
        self.name = name
        self.group = group
        self.tags = tags
        self.sensor = sensor
        self.supplier = supplier
        self.snapshots: list = [(now, 0, 0.0, -math.inf)]


def _key(name: str, group: str, tags: dict) -> tuple:
    return name, group, tuple(sorted(tags.items()))


class MetricsRegistry:
    """Sensors by (name, group, tags); asking again for the same one returns the same sensor."""

    def __init__(self, *, clock: Callable[[], int] = _wall_ms, sample_window_ms: int = DEFAULT_SAMPLE_WINDOW_MS,
                 num_samples: int = DEFAULT_NUM_SAMPLES) -> None:
        if sample_window_ms <= 0 or num_samples < 1:
            raise ValueError(f"metrics: sample window ({sample_window_ms} ms) must be > 0 and samples "
                             f"({num_samples}) >= 1")
        self._clock = clock
        self._window = sample_window_ms
        self._samples = num_samples
        self._entries: dict[tuple, _Entry] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ registration
    def _register(self, name: str, group: str, tags: Optional[dict], factory, supplier=None) -> Any:
        tags = dict(tags or {})
        key = _key(name, group, tags)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(name, group, tags, factory(), self._clock(), supplier)
            elif type(entry.sensor) is not type(factory()):
                raise ValueError(f"metric {name!r} in {group!r} {tags} is already registered as another kind")
            return entry.sensor

    def sensor(self, name: str, group: str, tags: Optional[dict] = None) -> Sensor:
        """`<name>-total` and `<name>-rate`."""
        return self._register(name, group, tags, Sensor)

    def latency_sensor(self, name: str, group: str, tags: Optional[dict] = None) -> LatencySensor:
        """`<name>-latency-avg`, `<name>-latency-max`, `<name>-rate`, `<name>-total`."""
        return self._register(name, group, tags, LatencySensor)

    def counter(self, name: str, group: str, tags: Optional[dict] = None) -> Counter:
        """One metric named `name` whose value is the counter's value."""
        return self._register(name, group, tags, Counter)

    def gauge(self, name: str, group: str, tags: Optional[dict], supplier: Callable[[], Any]) -> None:
        """One metric named `name` whose value is `supplier()` at read time."""
        self._register(name, group, tags, _GaugeSlot, supplier)

    def remove(self, **tags: Any) -> int:
        """Drop every sensor whose tags include all of `tags` (e.g. a closed task's); returns how many.
        Tag names use underscores for dashes: remove(task_id="0_1")."""
        want = {k.replace("_", "-"): v for k, v in tags.items()}
        with self._lock:
            gone = [k for k, e in self._entries.items() if all(e.tags.get(t) == v for t, v in want.items())]
            for k in gone:
                del self._entries[k]
        return len(gone)

    # ------------------------------------------------------------------ reading
    def _window_start(self, entry: _Entry, now: int) -> tuple:
        """Roll the snapshots and return the oldest one inside the measured window."""
        snaps = entry.snapshots
        sensor = entry.sensor
        if now - snaps[-1][0] >= self._window:
            current_max = getattr(sensor, "max", -math.inf)
            snaps.append((now, sensor.count, getattr(sensor, "sum", 0.0), current_max))
            if isinstance(sensor, LatencySensor):
                sensor.max = -math.inf
        horizon = now - self._samples * self._window
        while len(snaps) > 1 and snaps[0][0] < horizon:  # older than the samples Kafka keeps
            del snaps[0]
        return snaps[0]

    def _elapsed_s(self, since: int, now: int) -> float:
        elapsed = now - since
        full = elapsed // self._window
        minimum = self._samples - 1
        if full < minimum:
            elapsed += (minimum - full) * self._window
        return max(elapsed, 1) / 1000.0

    def metrics(self) -> list[Metric]:
        now = self._clock()
        out: list[Metric] = []
        with self._lock:
            entries = list(self._entries.values())
        for e in entries:
            s = e.sensor
            tags = dict(e.tags)
            if isinstance(s, _GaugeSlot):
                out.append(Metric(e.name, e.group, tags, e.supplier()))
            elif isinstance(s, Counter):
                out.append(Metric(e.name, e.group, tags, s.value))
            elif isinstance(s, Sensor):
                t0, c0, _, _ = self._window_start(e, now)
                out.append(Metric(f"{e.name}-total", e.group, tags, s.count))
                out.append(Metric(f"{e.name}-rate", e.group, dict(tags), (s.count - c0) / self._elapsed_s(t0, now)))
            else:  # LatencySensor
                snaps = e.snapshots
                current_max = s.max
                t0, c0, sum0, _ = self._window_start(e, now)
                window_max = max([m for _, _, _, m in snaps[1:]] + [current_max, s.max])
                n = s.count - c0
                avg = (s.sum - sum0) / n if n else math.nan
                out.append(Metric(f"{e.name}-latency-avg", e.group, tags, avg))
                out.append(Metric(f"{e.name}-latency-max", e.group, dict(tags),
                                  window_max if window_max != -math.inf else math.nan))
                out.append(Metric(f"{e.name}-rate", e.group, dict(tags), n / self._elapsed_s(t0, now)))
                out.append(Metric(f"{e.name}-total", e.group, dict(tags), s.count))
        return out

    def value(self, name: str, group: Optional[str] = None, **tags: Any) -> Any:
        """The value of one metric (tests and tools); tag names use underscores for dashes."""
        want = {k.replace("_", "-"): v for k, v in tags.items()}
        for m in self.metrics():
            if m.name == name and (group is None or m.group == group) and all(
                    m.tags.get(t) == v for t, v in want.items()):
                return m.value
        raise KeyError(f"no metric {name!r} in {group or 'any group'} with tags {want}")


class _GaugeSlot:
    __slots__ = ()


# ------------------------------------------------------------------------------ Kafka's sensors
def _task_tags(thread_id: str, task_id: Any) -> dict:
    return {"thread-id": thread_id, "task-id": str(task_id)}


def task_dropped_records_sensor(registry: MetricsRegistry, thread_id: str, task_id: Any) -> Sensor:
    """dropped-records-total / -rate (late records, records with invalid timestamps, skipped
    deserialization errors...)."""
    return registry.sensor("dropped-records", TASK_GROUP, _task_tags(thread_id, task_id))


def task_enforced_processing_sensor(registry: MetricsRegistry, thread_id: str, task_id: Any) -> Sensor:
    """enforced-processing-total / -rate: records a task processed while one of its input
    partitions had nothing buffered, its max.task.idle.ms having run out (Kafka's, KIP-695)."""
    return registry.sensor("enforced-processing", TASK_GROUP, _task_tags(thread_id, task_id))


def task_input_buffer_bytes_gauge(registry: MetricsRegistry, thread_id: str, task_id: Any,
                                  supplier: Callable[[], int]) -> None:
    """input-buffer-bytes-total: the key and value bytes of the records a task has buffered,
    not processed yet (Kafka's, KIP-770; what input.buffer.max.bytes bounds)."""
    registry.gauge("input-buffer-bytes-total", TASK_GROUP, _task_tags(thread_id, task_id), supplier)


def task_process_sensor(registry: MetricsRegistry, thread_id: str, task_id: Any) -> Sensor:
    """process-total / -rate of one task."""
    return registry.sensor("process", TASK_GROUP, _task_tags(thread_id, task_id))


def thread_process_sensor(registry: MetricsRegistry, thread_id: str) -> Sensor:
    """process-total / -rate of one stream thread."""
    return registry.sensor("process", THREAD_GROUP, {"thread-id": thread_id})


def thread_commit_sensor(registry: MetricsRegistry, thread_id: str) -> LatencySensor:
    """commit-latency-avg / -max, commit-rate / -total of one stream thread."""
    return registry.latency_sensor("commit", THREAD_GROUP, {"thread-id": thread_id})


def store_restore_sensors(registry: MetricsRegistry, thread_id: str, task_id: Any, store_type: str,
                          store_name: str) -> tuple[Sensor, Counter]:
    """(restore sensor: restore-total / -rate, restore-remaining-records-total counter) of one
    store; `store_type` is Kafka's store scope ("rocksdb", "in-memory", ...), tagged
    `<store_type>-state-id`. Add the records to restore to the counter when restore starts and
    subtract each restored batch."""
    tags = {**_task_tags(thread_id, task_id), f"{store_type}-state-id": store_name}
    return (registry.sensor("restore", STATE_GROUP, tags),
            registry.counter("restore-remaining-records-total", STATE_GROUP, tags))


def records_lag_max_gauge(registry: MetricsRegistry, client_id: str, supplier: Callable[[], int]) -> None:
    """records-lag-max of a consumer (the largest lag of its assigned partitions)."""
    registry.gauge("records-lag-max", CONSUMER_FETCH_GROUP, {"client-id": client_id}, supplier)


def client_state_gauge(registry: MetricsRegistry, client_id: str, supplier: Callable[[], Any]) -> None:
    """state of the Streams client (CREATED, RUNNING, REBALANCING, ...)."""
    registry.gauge("state", CLIENT_GROUP, {"client-id": client_id}, supplier)


def thread_state_gauge(registry: MetricsRegistry, thread_id: str, supplier: Callable[[], Any]) -> None:
    """thread-state of one stream thread."""
    registry.gauge("thread-state", THREAD_GROUP, {"thread-id": thread_id}, supplier)
