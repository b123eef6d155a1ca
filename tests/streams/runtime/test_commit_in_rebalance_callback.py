"""A commit made inside a rebalance callback never commits past what the tasks were given.

librdkafka runs rebalance callbacks in the middle of `consume()`: messages already gathered
into that call's result count in the consumer's position but have not reached any task yet.
The commit before a revocation must commit what was processed (last offset + 1), not that
position, or the gathered messages of a revoked partition are skipped by the next owner.
"""

from __future__ import annotations

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from state.directory import StateDirectory
from streams import StreamsBuilder, serdes
from streams.backends import for_config
from streams.runtime.config import StreamsConfig
from streams.runtime.thread import StreamThread

from _runtime_util import unique, wait_for


def _consume_exactly(consumer, n: int) -> list:
    got: list = []

    def more() -> bool:
        got.extend(m for m in consumer.consume(n - len(got), 0.2) if m.error() is None)
        return len(got) >= n

    wait_for(more, 30, f"{n} records")
    return got


def test_commit_before_revocation_ignores_messages_not_handed_to_tasks(tmp_path):
    app_id, lines, out = unique("cb-app"), unique("cb-lines"), unique("cb-out")
    config = StreamsConfig.parse({"application.id": app_id, "bootstrap.servers": f"local://{tmp_path / 'cluster'}",
                                  "state.dir": str(tmp_path / "state"), "replication.factor": 1})
    backend = for_config(config.backend_config())
    admin = backend.admin({})
    for future in admin.create_topics([NewTopic(lines, 1, 1), NewTopic(out, 1, 1)]).values():
        future.result(30)
    producer = backend.producer({})
    for i in range(10):
        producer.produce(lines, key=b"%d" % i, value=b"line %d" % i, partition=0)
    assert producer.flush(30) == 0

    builder = StreamsBuilder()
    builder.stream(lines, key_serde=serdes.BYTES, value_serde=serdes.BYTES).to(out)
    topology = builder.build()
    thread = StreamThread(1, topology=topology, subtopologies=topology.build(), config=config, backend=backend,
                          admin=admin, state_directory=StateDirectory(str(tmp_path / "state"), app_id),
                          process_id="p1", source_topics=[lines], on_state_change=lambda *_: None,
                          on_error=lambda *_: None, on_tasks_changed=lambda *_: None)
    thread._create_clients()
    tm, consumer = thread.task_manager, thread.consumer
    tp = TopicPartition(lines, 0)
    try:
        consumer.assign([TopicPartition(lines, 0, 0)])
        tm.handle_assignment([tp])
        wait_for(tm.initialize_and_restore, 30, "the task to run")
        tm.add_records(_consume_exactly(consumer, 4))
        assert tm.process(100) == 4
        _consume_exactly(consumer, 6)  # gathered by the consume() whose callback revokes
        assert consumer.position([tp])[0].offset == 10

        tm.handle_revocation([tp])

        committed = consumer.committed([tp], timeout=10)[0].offset
        assert committed == 4, f"committed {committed}: past the 4 records the task processed"
        assert not tm.tasks
    finally:
        thread._close_clients(flush=True)
        backend.close()
