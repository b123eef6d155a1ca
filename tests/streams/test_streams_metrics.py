"""streams.metrics: Kafka's names/groups/tags, totals, and rates/averages/maxima measured on read
with Kafka's sampled-window rule (30 s windows, 2 samples, elapsed stretched to >= 1 full window).
A test clock (ms) is injected; nothing sleeps."""

import math

import pytest

from streams import metrics as m


class Clock:
    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def reg(clock):
    return m.MetricsRegistry(clock=clock)


def test_dropped_records_names_group_tags(reg, clock):
    s = m.task_dropped_records_sensor(reg, "app-StreamThread-1", "0_1")
    assert m.task_dropped_records_sensor(reg, "app-StreamThread-1", "0_1") is s  # same sensor
    s.count += 1  # the hot path: one integer increment
    s.record(2)
    clock.now = 10_000
    got = {(x.name, x.group): x for x in reg.metrics()}
    total = got[("dropped-records-total", "stream-task-metrics")]
    assert total.value == 3 and total.tags == {"thread-id": "app-StreamThread-1", "task-id": "0_1"}
    # 10 s elapsed, stretched by one window to 40 s (Kafka's Rate.windowSize): 3 / 40
    assert got[("dropped-records-rate", "stream-task-metrics")].value == pytest.approx(0.075)


def test_rate_window_rolls_and_expires(reg, clock):
    s = m.thread_process_sensor(reg, "t1")
    s.record(3)
    clock.now = 60_000
    assert reg.value("process-rate", "stream-thread-metrics", thread_id="t1") == pytest.approx(3 / 60)
    s.record(6)
    clock.now = 100_000
    # the sample that started at 0 is older than 2 x 30 s: the window is [60 s, 100 s], 6 records
    assert reg.value("process-rate", thread_id="t1") == pytest.approx(6 / 40)
    assert reg.value("process-total", thread_id="t1") == 9


def test_commit_latency(reg, clock):
    c = m.thread_commit_sensor(reg, "t1")
    c.record(10)
    c.record(30)
    clock.now = 1_000
    assert reg.value("commit-latency-avg", "stream-thread-metrics", thread_id="t1") == 20
    assert reg.value("commit-latency-max", thread_id="t1") == 30
    assert reg.value("commit-total", thread_id="t1") == 2
    assert reg.value("commit-rate", thread_id="t1") == pytest.approx(2 / 31)
    clock.now = 31_000  # a new sample starts; the old one still counts
    c.record(5)
    assert reg.value("commit-latency-max", thread_id="t1") == 30
    assert reg.value("commit-latency-avg", thread_id="t1") == pytest.approx(15)
    clock.now = 95_000  # every record is older than the two samples: no measurement
    assert math.isnan(reg.value("commit-latency-avg", thread_id="t1"))
    assert math.isnan(reg.value("commit-latency-max", thread_id="t1"))
    assert reg.value("commit-total", thread_id="t1") == 3


def test_restore_metrics(reg, clock):
    restore, remaining = m.store_restore_sensors(reg, "t1", "1_0", "rocksdb", "counts")
    remaining.record(100)
    restore.record(40)
    remaining.record(-40)
    tags = dict(thread_id="t1", task_id="1_0")
    assert reg.value("restore-total", "stream-state-metrics", **tags) == 40
    assert reg.value("restore-remaining-records-total", "stream-state-metrics", **tags) == 60
    metric = next(x for x in reg.metrics() if x.name == "restore-total")
    assert metric.tags == {"thread-id": "t1", "task-id": "1_0", "rocksdb-state-id": "counts"}


def test_gauges_and_state(reg):
    lag = {"v": 7}
    m.records_lag_max_gauge(reg, "app-StreamThread-1-consumer", lambda: lag["v"])
    m.client_state_gauge(reg, "app", lambda: "RUNNING")
    m.thread_state_gauge(reg, "t1", lambda: "RUNNING")
    assert reg.value("records-lag-max", "consumer-fetch-manager-metrics") == 7
    lag["v"] = 3
    assert reg.value("records-lag-max") == 3  # read at read time
    assert reg.value("state", "stream-metrics", client_id="app") == "RUNNING"
    assert reg.value("thread-state", "stream-thread-metrics", thread_id="t1") == "RUNNING"


def test_remove_by_tags(reg):
    m.task_process_sensor(reg, "t1", "0_0")
    m.task_process_sensor(reg, "t1", "0_1")
    m.task_dropped_records_sensor(reg, "t1", "0_1")
    assert reg.remove(task_id="0_1") == 2
    assert {(x.name, x.tags["task-id"]) for x in reg.metrics()} == {("process-total", "0_0"), ("process-rate", "0_0")}
    with pytest.raises(KeyError, match="dropped-records-total"):
        reg.value("dropped-records-total", task_id="0_1")


def test_kind_conflict_and_bad_config(reg):
    reg.sensor("x", "g", {})
    with pytest.raises(ValueError, match="another kind"):
        reg.counter("x", "g", {})
    with pytest.raises(ValueError):
        m.MetricsRegistry(sample_window_ms=0)
