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
