"""The reader's constructor as DESIGN.md writes it: `StoreChangelogReader(restore_consumer,
listener=...)`, at-least-once unless told otherwise (Kafka's default processing guarantee)."""

from __future__ import annotations

from state import StateRestoreListener
from state.restore import StoreChangelogReader, restore_consumer_config
from streams.backends import for_config


def test_reader_defaults_to_at_least_once(tmp_path):
    backend = for_config({"bootstrap.servers": f"local://{tmp_path}"})
    consumer = backend.consumer(restore_consumer_config(False))
    try:
        reader = StoreChangelogReader(consumer, listener=StateRestoreListener())
        assert reader.eos_enabled is False
        assert reader.all_changelogs_completed() and reader.restore() == 0  # nothing registered
    finally:
        consumer.close()
        backend.close()
