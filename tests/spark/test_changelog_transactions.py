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


def test_a_segment_changed_between_the_walk_and_the_read_is_walked_again(tmp_path, monkeypatch):
    """The log cleaner swaps a segment for its cleaned copy under the same name (or the log is
    truncated) between the walk of the batch headers and the read of their bytes: the read walks
    the log again from where it got, instead of failing on a torn batch. The swap cannot be timed
    for real: the first walk here reports the last batch shorter than it is, so that the bytes
    read cut it, as a stale walk's positions cut a rewritten segment's batches."""
    servers = f"local://{tmp_path}/cluster"
    backend = for_config({"bootstrap.servers": servers})
    try:
        backend.admin().create_topics([NewTopic("t", 1, 1)])["t"].result(30)
        producer = backend.producer({})
        for i in range(30):
            producer.produce("t", key=f"k{i}".encode(), value=f"v{i}".encode())
            producer.flush(30)  # a batch each
        spec = changelog_core.ChangelogSpec(servers, "t", "STRING", "STRING")
        schema = changelog_core.changelog_schema(spec)
        (prange,) = wait_until(lambda: (p := changelog_core.plan(spec))[0].end == 30 and p, 30, "30 records")
        real_walk, walks = changelog_core._walk, []

        def stale_once(log_dir, only_last=False):
            batches, start = real_walk(log_dir, only_last)
            walks.append(len(batches))
            if len(walks) == 1 and not only_last:
                last = batches[-1]
                batches[-1] = changelog_core._Batch(last.base, last.next, last.pid, last.txn, last.control,
                                                    last.position, last.size - 10)
            return batches, start
        monkeypatch.setattr(changelog_core, "_walk", stale_once)
        got = [(r["key"], r["value"]) for b in changelog_core.partition_batches(spec, prange, schema)
               for r in b.to_pylist()]
        assert got == [(f"k{i}", f"v{i}") for i in range(30)]
        assert len(walks) >= 2  # walked again after the torn read
    finally:
        backend.close()
