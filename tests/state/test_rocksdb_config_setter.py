"""rocksdb.config.setter (state/rocksdb_config.py): Kafka's RocksDBConfigSetter. A RocksDB store
hands its options to a new instance of the configured class each time it opens its database,
and that instance's close follows the handle's; RocksDB really opens with what it set."""

import itertools
import pathlib

import pytest

from state import RocksDBConfigSetter
from state.errors import StateError
from state.rocksdb_config import config_setter_class
from state.rocksdb_kv import BULK_LOAD_MIN_RECORDS, BULK_LOAD_WRITE_BUFFER_SIZE, RocksDBKeyValueStore
from state.session import RocksDBSessionStore
from state.window import RocksDBWindowStore

from recording_context import RecordingContext

KEY = "rocksdb.config.setter"
SETTER_WRITE_BUFFER = 3 * 1024 * 1024 + 4096
SETTER_TARGET_FILE = 7 * 1024 * 1024


class Recorder(RocksDBConfigSetter):
    """Sets two options and records every call as (instance serial, call, store name, extra)
    (a serial, not id(): a closed instance's id may be reused by the next one)."""

    calls: list = []
    made = itertools.count()

    def __init__(self):
        self.serial = next(Recorder.made)

    def set_config(self, store_name, options, configs):
        options.set_write_buffer_size(SETTER_WRITE_BUFFER)
        options.set_target_file_size_base(SETTER_TARGET_FILE)
        self.options = options
        Recorder.calls.append((self.serial, "set_config", store_name, configs.get("application.id")))

    def close(self, store_name, options):
        assert options is self.options  # the options it set, as Kafka's close gets them
        Recorder.calls.append((self.serial, "close", store_name, None))


class Failing(RocksDBConfigSetter):
    def set_config(self, store_name, options, configs):
        raise RuntimeError("no options for you")


class RefusesToCreate(Recorder):
    def set_config(self, store_name, options, configs):
        super().set_config(store_name, options, configs)
        options.create_if_missing(False)


class CloseFails(Recorder):
    def close(self, store_name, options):
        super().close(store_name, options)
        raise RuntimeError("cannot let go")


class DuckTyped:  # no base class: a set_config method is enough
    seen: list = []

    def set_config(self, store_name, options, configs):
        DuckTyped.seen.append(store_name)


@pytest.fixture(autouse=True)
def fresh_calls():
    Recorder.calls = []
    DuckTyped.seen = []


def recorded_options(path: pathlib.Path) -> dict:
    """The default column family's options in the newest OPTIONS file RocksDB wrote in `path`."""
    newest = max(path.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    options, section = {}, None
    for line in newest.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif "=" in line and section == '[CFOptions "default"]':
            name, _, value = line.partition("=")
            options[name] = value
    return options


def open_store(tmp_path, setter, name="kv"):
    store = RocksDBKeyValueStore(name)
    store.init(RecordingContext(tmp_path / "0_1", config={"application.id": "app", KEY: setter}))
    return store


def test_rocksdb_opens_with_what_the_setter_set(tmp_path):
    store = open_store(tmp_path, Recorder)
    options = recorded_options(store.path)
    assert options["write_buffer_size"] == str(SETTER_WRITE_BUFFER)
    assert options["target_file_size_base"] == str(SETTER_TARGET_FILE)
    store.put(b"k", b"v")
    store.close()
    [(first, call, name, app), (second, close, closed_name, _)] = Recorder.calls
    assert (call, name, app) == ("set_config", "kv", "app") and (close, closed_name) == ("close", "kv")
    assert first == second
    plain = RocksDBKeyValueStore("plain")
    plain.init(RecordingContext(tmp_path / "0_2"))
    assert recorded_options(plain.path)["write_buffer_size"] == str(16 * 1024 * 1024)  # Eddy's default
    plain.close()


@pytest.mark.parametrize("name", [f"{__name__}.Recorder", f"{__name__}:Recorder"])
def test_the_setter_may_be_named(tmp_path, name):
    store = open_store(tmp_path, name)
    assert recorded_options(store.path)["write_buffer_size"] == str(SETTER_WRITE_BUFFER)
    store.close()
    assert [c[1] for c in Recorder.calls] == ["set_config", "close"]


def test_a_class_with_set_config_and_no_close_will_do(tmp_path):
    store = open_store(tmp_path, DuckTyped, name="duck")
    store.close()
    assert DuckTyped.seen == ["duck"]


def test_each_handle_of_a_bulk_loading_restore_has_its_own_setter(tmp_path):
    """Bulk loading reopens the database twice: a new instance each time, the restore's
    settings over the setter's while it lasts, each instance closed with its handle."""
    store = open_store(tmp_path, Recorder)
    store.put(b"before", b"1")
    store.start_bulk_loading(BULK_LOAD_MIN_RECORDS)
    assert store.bulk_loading
    bulk = recorded_options(store.path)
    assert bulk["write_buffer_size"] == str(BULK_LOAD_WRITE_BUFFER_SIZE)  # the restore's own
    assert bulk["target_file_size_base"] == str(SETTER_TARGET_FILE)  # the setter's, kept
    store.restore_batch([(b"restored", b"2")])
    store.end_bulk_loading()
    assert recorded_options(store.path)["write_buffer_size"] == str(SETTER_WRITE_BUFFER)
    assert store.get(b"before") == b"1" and store.get(b"restored") == b"2"
    store.close()
    instances = []
    for instance, call, name, _ in Recorder.calls:
        assert name == "kv"
        if call == "set_config":
            assert instance not in instances
            instances.append(instance)
        else:
            assert instance == instances[-1]  # the handle that closed is the last one opened
    assert [c[1] for c in Recorder.calls] == ["set_config", "close"] * 3


@pytest.mark.parametrize("make", [
    lambda: RocksDBWindowStore("win", retention_ms=60_000, segment_interval_ms=30_000, window_size_ms=1_000),
    lambda: RocksDBSessionStore("sess", retention_ms=60_000, segment_interval_ms=30_000),
], ids=["window", "session"])
def test_window_and_session_stores_use_it_under_their_name(tmp_path, make):
    store = make()
    store.init(RecordingContext(tmp_path / "0_1", config={KEY: Recorder}))
    assert recorded_options(tmp_path / "0_1" / "rocksdb" / store.name)["write_buffer_size"] == str(SETTER_WRITE_BUFFER)
    store.close()
    assert [(c[1], c[2]) for c in Recorder.calls] == [("set_config", store.name), ("close", store.name)]


@pytest.mark.parametrize("value,says", [
    (42, "got 42"),
    (Recorder(), "got an instance of Recorder"),
    ("no_such_module_for_eddy.Setter", "cannot import module 'no_such_module_for_eddy'"),
    ("json.NoSuchSetter", "names nothing"),
    ("json.dumps", "names a function, not a class"),
    ("Recorder", "not a 'package.module.Class' name"),
    (dict, "has no set_config"),
])
def test_a_bad_setter_config_is_named(value, says):
    with pytest.raises(ValueError, match=KEY) as info:
        config_setter_class({KEY: value})
    assert says in str(info.value)


def test_a_store_refuses_a_bad_setter_config(tmp_path):
    with pytest.raises(StateError, match="'kv'.*rocksdb.config.setter.*got 42"):
        open_store(tmp_path, 42)


def test_a_failing_set_config_names_the_store_and_opens_nothing(tmp_path):
    store = RocksDBKeyValueStore("kv")
    with pytest.raises(StateError, match="'kv'.*Failing failed to set its options.*no options for you"):
        store.init(RecordingContext(tmp_path / "0_1", config={KEY: Failing}))
    assert not store.is_open
    store.open(tmp_path / "0_1" / "rocksdb" / "kv")  # nothing was left half open
    store.close()


def test_options_rocksdb_refuses_close_the_setter(tmp_path):
    with pytest.raises(StateError, match="'kv': cannot open RocksDB"):
        open_store(tmp_path, RefusesToCreate)
    assert [c[1] for c in Recorder.calls] == ["set_config", "close"]


def test_a_failing_close_names_the_store_after_the_data_is_safe(tmp_path):
    store = open_store(tmp_path, CloseFails)
    store.put(b"k", b"v")
    with pytest.raises(StateError, match="'kv'.*CloseFails.close failed.*cannot let go"):
        store.close()
    assert not store.is_open
    store.open(store.path)
    assert store.get(b"k") == b"v"
    store.close()
