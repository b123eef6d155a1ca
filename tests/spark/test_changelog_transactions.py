"""read_committed on the embedded cluster's files: aborted transactions left out, the end held
at the first offset of a transaction still open (the last stable offset)."""

from __future__ import annotations

from confluent_kafka.admin import NewTopic

from connectors.spark import changelog_core
from streams.backends import for_config

from _spark_apps import wait_until


def test_aborted_and_open_transactions(tmp_path):
    servers = f"local://{tmp_path}/cluster"
    backend = for_config({"bootstrap.servers": servers})
    try:
        backend.admin().create_topics([NewTopic("t", 1, 1)])["t"].result(30)
        plain = backend.producer({})
        plain.produce("t", key=b"p0", value=b"plain")
        assert plain.flush(30) == 0
        txn = backend.producer({"transactional.id": "tx-test"})
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce("t", key=b"a", value=b"aborted")
        txn.abort_transaction(30)
        txn.begin_transaction()
        txn.produce("t", key=b"c", value=b"committed")
        txn.commit_transaction(30)
        other = backend.producer({"transactional.id": "tx-open"})
        other.init_transactions(30)
        other.begin_transaction()
        other.produce("t", key=b"o", value=b"open")
        assert other.flush(30) == 0
        plain.produce("t", key=b"p1", value=b"after the open one")
        assert plain.flush(30) == 0

        spec = changelog_core.ChangelogSpec(servers, "t", "STRING", "STRING")
        schema = changelog_core.changelog_schema(spec)

        def rows():
            (prange,) = changelog_core.plan(spec)
            return prange, [(r["key"], r["value"]) for b in changelog_core.partition_batches(spec, prange, schema)
                            for r in b.to_pylist()]

        prange, got = wait_until(lambda: (r := rows())[1][-1:] == [("c", "committed")] and r, 30, "the commit")
        assert got == [("p0", "plain"), ("c", "committed")]
        open_offset = prange.end  # held at the open transaction's first record
        other.commit_transaction(30)
        _prange, got = wait_until(lambda: (r := rows())[0].end > open_offset + 1 and r, 30, "the second commit")
        assert got == [("p0", "plain"), ("c", "committed"), ("o", "open"), ("p1", "after the open one")]
    finally:
        backend.close()


def test_a_segment_the_cleaner_swaps_during_a_read_is_read_as_walked(tmp_path):
    """The log cleaner swaps cleaned segments in (new files under the old names, the old ones
    deleted) while a read is between its walk of the batch headers and the read of their
    bytes: the read hands out the log as walked, every record of it, from the files it opened."""
    from replication.cleaner import LogCleaner
    from replication.log import Log
    from replication.records import encode_batch

    t0 = 1_700_000_000_000
    log = Log(str(tmp_path / "t-0"), {"cleanup.policy": "compact", "segment.bytes": 1024, "segment.ms": 10**12,
                                      "index.interval.bytes": 128}, clock=lambda: t0)
    try:
        written = []
        for i in range(300):  # ten keys overwritten thirty times: most of it is cleanable
            key, value = f"k{i % 10}".encode(), f"v{i}".encode()
            log.append_as_leader(encode_batch([(key, value, t0)]), 0, now=t0)
            written.append((key, value))
        assert log.num_segments > 5
        prange = changelog_core.PartitionRange(0, 0, log.log_end_offset)
        reads = changelog_core._read_messages(str(tmp_path / "t-0"), "t", prange)
        got = [(m.key(), m.value()) for m in next(reads)]  # walked, and the first segment read
        stats = LogCleaner().clean(log, now_ms=t0)
        assert stats.groups >= 1 and stats.records_retained < stats.records_read  # swapped under the read
        got += [(m.key(), m.value()) for msgs in reads for m in msgs]
        assert got == written
    finally:
        log.close()
