"""Benchmark: end-to-end latency of a trickle of records through an app on a real Kafka broker,
with the Kafka backend's consumer (PollingConsumer: a consume returns once any record is there,
as Kafka's poll does) against librdkafka's plain batch consume (which waits for its whole batch
or its timeout) as the baseline, in the same run.

    python bench/kafka_poll_latency.py [--records 200] [--interval-ms 50] [--bootstrap-servers HOST:PORT]

The broker is `--bootstrap-servers`, else `KAFKA_BOOTSTRAP_SERVERS`, else a local Apache Kafka
broker started as the integration tests start it. The app, one stream thread, at least once:
`stream(in).map(value -> (value, value)).repartition().map_values(upper).to(out)`: two hops
through the stream thread's consumer (the input, then the repartition topic). A producer writes
`--records` records, one every `--interval-ms` (linger.ms 0), each stamped with its send time; a
reader takes each output record as soon as its poll has it. Latency: the time it was read less
the time it was sent (the output keeps the input's timestamp). Printed: the median and 90th
percentile of each consumer and the ratio of the medians.

Then the Spark export's changelog reader (connectors.spark.changelog_core, a consume of up to
10,000 records at a time with a 0.5 s timeout) reads a topic of 8 partitions of 2,000 records
each, one partition after the other to its end, with each consumer: the seconds of each and
their ratio.

Not a test: nothing is asserted, but a run that loses a record fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from rich.console import Console  # noqa: E402

from connectors.kafka import backend as kafka_backend  # noqa: E402
from streams import App, AppState, StreamsBuilder, serdes  # noqa: E402
from streams.testing.kafka_fixture import local_apache_kafka  # noqa: E402

S = serdes.STRING


@contextlib.contextmanager
def consumer_kind(polling: bool) -> Iterator[None]:
    """The Kafka backend's consumers inside the block: the PollingConsumer (`polling`), else
    librdkafka's plain Consumer (the baseline: every consume a batch consume)."""
    original = kafka_backend.PollingConsumer
    if not polling:
        kafka_backend.PollingConsumer = Consumer
    try:
        yield
    finally:
        kafka_backend.PollingConsumer = original


def topology(in_topic: str, out_topic: str):
    b = StreamsBuilder()
    (b.stream(in_topic, key_serde=S, value_serde=S)
        .map(lambda key, value: (value, value))
        .repartition(key_serde=S, value_serde=S)
        .map_values(str.upper)
        .to(out_topic, key_serde=S, value_serde=S))
    return b.build()


def run(bootstrap: str, n: int, interval_s: float, work: str, polling: bool) -> list[float]:
    """The latencies (ms) of `n` records through the app, its consumers polling as Kafka does
    (`polling`) or with librdkafka's batch consume."""
    suffix = uuid.uuid4().hex[:8]
    in_topic, out_topic = f"latency-in-{suffix}", f"latency-out-{suffix}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in (in_topic, out_topic)]).values():
        future.result(30)
    with consumer_kind(polling):
        app = App(topology(in_topic, out_topic), {
            "application.id": f"latency-{suffix}", "bootstrap.servers": bootstrap,
            "state.dir": os.path.join(work, f"state-{suffix}"), "replication.factor": 1,
            "consumer.session.timeout.ms": 6000})
        return _measure(app, bootstrap, in_topic, out_topic, suffix, n, interval_s)


def _measure(app: App, bootstrap: str, in_topic: str, out_topic: str, suffix: str, n: int,
             interval_s: float) -> list[float]:
    """Start `app`, send the records one every `interval_s` and read each one's latency (ms)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-reader-{suffix}",
                       "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    try:
        app.start()
        if not app.wait_for_state(AppState.RUNNING, timeout=120):
            raise SystemExit(f"app not RUNNING: {app.state}")
        reader.assign([TopicPartition(out_topic, 0, 0)])
        latencies: list[float] = []
        done = threading.Event()

        def read() -> None:
            deadline = None
            while len(latencies) < n:
                msg = reader.poll(0.005)
                if msg is not None and msg.error() is None:
                    latencies.append(time.time() * 1000 - msg.timestamp()[1])
                if done.is_set():
                    deadline = deadline or time.monotonic() + 60
                    if time.monotonic() > deadline:
                        return
        reading = threading.Thread(target=read, daemon=True)
        reading.start()
        pace = threading.Event()
        for i in range(n):
            producer.produce(in_topic, key=b"k", value=b"record-%d" % i, timestamp=int(time.time() * 1000))
            producer.poll(0)
            pace.wait(interval_s)
        producer.flush(30)
        done.set()
        reading.join()
        if len(latencies) < n:
            raise SystemExit(f"only {len(latencies)} of {n} records came out")
        return latencies
    finally:
        app.close(timeout=60)
        reader.close()


def read_changelog(bootstrap: str, polling: bool, partitions: int = 8, per_partition: int = 2000) -> float:
    """Seconds for the Spark changelog reader to read every partition of a new topic to its end."""
    from connectors.spark.changelog_core import ChangelogSpec, PartitionRange, _KafkaLog

    topic = f"latency-changelog-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, key=b"k%d" % i, value=b"v", partition=p)
        producer.poll(0)
    producer.flush(30)
    log = _KafkaLog(ChangelogSpec(bootstrap, topic))
    with consumer_kind(polling):
        t0 = time.perf_counter()
        read = sum(len(batch) for p in range(partitions)
                   for batch in log.messages(PartitionRange(p, 0, per_partition)))
        elapsed = time.perf_counter() - t0
    if read != partitions * per_partition:
        raise SystemExit(f"the changelog reader read {read} of {partitions * per_partition} records")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=50)
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None)
    args = parser.parse_args()
    console = Console()
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="eddy-latency-") as work:
        bootstrap = args.bootstrap_servers or stack.enter_context(local_apache_kafka()).bootstrap_servers
        results = {}
        for label, polling in (("batch consume", False), ("Kafka's poll", True)):
            latencies = run(bootstrap, args.records, args.interval_ms / 1000, work, polling)
            p90 = statistics.quantiles(latencies, n=10)[-1]
            results[label] = statistics.median(latencies)
            console.print(f"{label:<14}: median {results[label]:6.1f} ms, p90 {p90:6.1f} ms ({len(latencies)} records)")
        base, new = results.values()
        console.print(f"median latency ratio, Kafka's poll / batch consume: {new / base:.2f}")
        seconds = {label: read_changelog(bootstrap, polling)
                   for label, polling in (("batch consume", False), ("Kafka's poll", True))}
        for label, secs in seconds.items():
            console.print(f"changelog read, {label:<14}: {secs:6.2f} s (8 partitions of 2,000 records)")
        base, new = seconds.values()
        console.print(f"changelog read time ratio, Kafka's poll / batch consume: {new / base:.2f}")


if __name__ == "__main__":
    main()
