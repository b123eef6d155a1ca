"""KIP-447: offsets sent in a transaction carry the consumer's group generation, and a
producer holding the metadata of a generation that rebalanced away cannot commit them."""

from __future__ import annotations

from _clients_util import GROUP_CONF, create_topic, unique, wait_for
import pytest
from confluent_kafka import KafkaException, TopicPartition


@pytest.mark.needs_faithful_broker(reason="TxnOffsetCommit does not check the group generation (KIP-447)")
def test_offsets_with_a_stale_generation_are_refused_and_the_transaction_must_abort(backend, admin) -> None:
    source = create_topic(admin, partitions=2, prefix="src")
    sink = create_topic(admin, prefix="sink")
    group = unique("g")
    first = backend.consumer({"group.id": group, **GROUP_CONF})
    first.subscribe([source])
    wait_for(lambda: (first.poll(0.05), len(first.assignment()) == 2)[1], 40, "the first member to own both partitions")
    stale = first.consumer_group_metadata()
    second = backend.consumer({"group.id": group, **GROUP_CONF})
    second.subscribe([source])
    wait_for(lambda: (first.poll(0.05), second.poll(0.05), len(first.assignment()) == len(second.assignment()) == 1)[2],
             40, "the group to rebalance to a partition each")
    producer = backend.producer({"transactional.id": unique("tx")})
    producer.init_transactions(15)

    producer.begin_transaction()
    producer.produce(sink, value=b"zombie")
    try:
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 3)], stale, 10)
    except KafkaException as exc:
        error = exc.args[0]
    else:
        raise AssertionError("offsets with a stale generation were accepted")
    assert error.code() in (22, 25), error  # ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID
    assert error.txn_requires_abort(), error
    producer.abort_transaction(15)
    assert first.committed([TopicPartition(source, 0)], timeout=10)[0].offset < 0

    producer.begin_transaction()
    producer.produce(sink, value=b"current")
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 3)], first.consumer_group_metadata(), 10)
    producer.commit_transaction(15)
    assert first.committed([TopicPartition(source, 0)], timeout=10)[0].offset == 3
