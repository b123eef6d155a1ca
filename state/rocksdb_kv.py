"""RocksDB key-value store on rocksdict (raw bytes mode), tuned like Kafka's RocksDBStore.

The write-ahead log is disabled for every write, as in Kafka Streams: the changelog topic is the
source of truth, and `flush()` (called by the state manager before it writes the checkpoint)
flushes the memtables to SST files so that everything up to the checkpointed offset is on disk.
A key-value store's puts and deletes first wait as pending writes in front of RocksDB (see
PENDING_WRITES_MAX_BYTES); `flush()` writes them before it flushes.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import pathlib
import threading
from _thread import get_ident as _get_ident
from itertools import starmap
from typing import Any, Iterable, Iterator, Mapping, Optional

from rocksdict import (
    BlockBasedOptions,
    Cache,
    DBCompactionStyle,
    DBCompressionType,
    MemtableFactory,
    Options,
    ReadOptions,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from state.errors import StateError, StoreClosedError, StoreLayoutError
from state.rocksdb_config import ROCKSDB_CONFIG_SETTER, config_setter_class
from state.store import (
    IteratorTracker,
    KeyValueIterator,
    KeyValueStore,
    StoreContext,
    check_key,
    check_value,
    checked_range_bounds,
)

log = logging.getLogger(__name__)

MiB = 1024 * 1024
WRITE_BUFFER_SIZE = 16 * MiB
MAX_WRITE_BUFFERS = 3
BLOCK_CACHE_SIZE = 50 * MiB
BLOCK_SIZE = 4096
BLOOM_BITS_PER_KEY = 10
# A whole-key bloom filter in each memtable (this share of the write buffer: 320 KiB of 16 MiB,
# about 9 bits a key for a memtable of small entries). Kafka's defaults have none. A point
# lookup then skips every memtable that cannot hold its key instead of searching its skiplist:
# gets of a table's 250,000 keys, rewritten in rounds, take 0.74 of the time
# (bench/rocksdb_point_lookup.py: 3.09 against 2.27 us).
MEMTABLE_BLOOM_RATIO = 0.02

# Bulk loading while a large restore streams in (Kafka Streams' RocksDBStore did the same with
# toggleDbForBulkLoading, which closed the DB and reopened it with bulk-load options):
# - automatic compactions off, so the restored data is compacted once when the mode ends instead
#   of over and over while it arrives (with them off RocksDB applies no level-0 write stalls);
# - a vector memtable: an insert is an append (a skiplist insert is a search through a deep list
#   and was more than half of the restore's time, spent holding the GIL), and the sort happens in
#   RocksDB's flush thread, which runs without the GIL on another core. A vector memtable answers
#   reads by sorting a copy of itself, so nothing reads the store in this mode: every read (and
#   every write other than restore_batch) first ends it;
# - small write buffers (4 MiB: cheaper, cache-friendly sorts), flushed four at a time into one
#   16 MiB level-0 file, up to 12 of them (48 MiB, the same memory as the normal 3 x 16 MiB), and
#   two flush threads (max_background_jobs 8): the flushes keep up better, and the sorts still
#   queued when the mode ends, which the store waits for, run on both cores.
# The memtable kind cannot change on an open DB, so the mode starts and ends with a flush, close
# and reopen. It starts when the changelog reader begins a restore of at least
# BULK_LOAD_MIN_RECORDS records (start_bulk_loading), or once that many were restored since the
# last flush (a standby catching up). It ends when the reader completes the store's restore
# (end_bulk_loading), at flush() (the state manager flushes at every checkpoint), at the first
# read, or at close(). Once level 0 holds BULK_LOAD_MAX_L0_FILES files (below the slowdown
# trigger, 20, that applies with compactions on) automatic compactions come back on for the rest
# of the mode. A process that dies in the mode leaves its options in RocksDB's OPTIONS file;
# open() always passes the store's own options.
BULK_LOAD_MIN_RECORDS = 100_000  # a restore (or records since the last flush) that turns it on
BULK_LOAD_MAX_L0_FILES = 12
BULK_LOAD_CHECK_EVERY = 16  # restored batches between two looks at the level-0 file count
BULK_LOAD_WRITE_BUFFER_SIZE = 4 * MiB
BULK_LOAD_MAX_WRITE_BUFFERS = 12
BULK_LOAD_BUFFERS_TO_MERGE = 4
BULK_LOAD_MAX_BACKGROUND_JOBS = 8  # RocksDB runs max(1, jobs / 4) flushes at once
_BULK_OFF, _BULK_ON, _BULK_DONE = 0, 1, 2  # _BULK_DONE: ended early, stays off until flush()
_BULK_COMPACTING = 3  # still bulk loading, with automatic compactions back on (level 0 was full)
_L0_FILES = "rocksdb.num-files-at-level0"

# Pending writes: a key-value store's puts and deletes wait in a dict in front of RocksDB and go
# down as one WriteBatch when they pass PENDING_WRITES_MAX_BYTES, and before anything else reads
# or writes RocksDB (a range read, put_all, flush, close, a checkpoint, bulk loading). Point reads
# (get, and the reads of delete and put_if_absent) find a pending value there. With the WAL off
# this loses nothing RocksDB's own memtable would keep: flush() (before every checkpoint) and
# close() write them first, and the changelog has them. What it saves is large where keys are
# hot: a get of a key rewritten over and over in a 16 MiB memtable searches a deep skiplist
# (about 1.9 us with 10,000 keys), a dict lookup takes tens of ns, and each put crossed into
# RocksDB on its own. An uncached table rewriting 10,000 users (bench/windowed.py --table-design
# uncached-hot) spent 8.7 s of stream-thread CPU, 5.8 s with them. Each pending entry counts its
# key, its value and PENDING_ENTRY_OVERHEAD (the dict slot and the two bytes objects' headers).
PENDING_WRITES_MAX_BYTES = 1 * MiB
PENDING_ENTRY_OVERHEAD = 100
_DIRECT_WRITES = 2  # pending writes this few go down as plain puts and deletes (_write_pending)
_ABSENT = object()

LAYOUT_FILE = "EDDY_STORE_LAYOUT"

# Runs an iterator to its end from C (a deque of length 0 keeps nothing).
_drain = collections.deque(maxlen=0).extend
ESTIMATE_NUM_KEYS = "rocksdb.estimate-num-keys"

# One block cache for the whole process: Kafka gives each store its own 50 MiB cache, which in a
# Python process hosting many tasks multiplies memory; sharing bounds it (LRU across stores).
_shared_block_cache: Optional[Cache] = None


def _block_cache() -> Cache:
    global _shared_block_cache
    if _shared_block_cache is None:
        _shared_block_cache = Cache(BLOCK_CACHE_SIZE)
    return _shared_block_cache


def rocksdb_options(bulk_loading: bool = False) -> Options:
    """Options like Kafka's RocksDBStore defaults (write buffers, block cache, bloom filter);
    with `bulk_loading`, the restore's bulk-load options on top (see BULK_LOAD_* above)."""
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(WRITE_BUFFER_SIZE)
    opts.set_max_write_buffer_number(MAX_WRITE_BUFFERS)
    opts.set_compaction_style(DBCompactionStyle.universal())
    opts.set_compression_type(DBCompressionType.none())
    # What increase_parallelism(cores) sets, without its side effect: it also shrinks the
    # process-wide flush thread pool to one thread whenever any store builds its options, which
    # would take the second flush thread from a store that is bulk loading. RocksDB grows the
    # pools to what an opened DB's max_background_jobs needs.
    opts.set_max_background_jobs(max(os.cpu_count() or 2, 2))
    opts.set_keep_log_file_num(2)
    table = BlockBasedOptions()
    table.set_block_cache(_block_cache())
    table.set_block_size(BLOCK_SIZE)
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    opts.set_block_based_table_factory(table)
    opts.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO)
    opts.set_memtable_whole_key_filtering(True)
    if bulk_loading:
        _apply_bulk_loading(opts)
    return opts


def _apply_bulk_loading(opts: Options) -> None:
    """The restore's bulk-load options (see BULK_LOAD_* above) over `opts`."""
    opts.set_disable_auto_compactions(True)
    opts.set_allow_concurrent_memtable_write(False)  # only the skiplist supports it
    opts.set_memtable_factory(MemtableFactory.vector())
    opts.set_write_buffer_size(BULK_LOAD_WRITE_BUFFER_SIZE)
    opts.set_max_write_buffer_number(BULK_LOAD_MAX_WRITE_BUFFERS)
    opts.set_max_background_jobs(BULK_LOAD_MAX_BACKGROUND_JOBS)
    opts.set_min_write_buffer_number_to_merge(BULK_LOAD_BUFFERS_TO_MERGE)
    opts.set_memtable_prefix_bloom_ratio(0.0)  # the mode ends at the first read: nothing to filter


def _open_rdict(path: pathlib.Path, options: Options) -> Rdict:
    # The default column family's options are passed too: given only the DB options, rocksdict
    # reopens the column family with the options last persisted in the OPTIONS file, which after
    # a crash in bulk loading mode are the bulk-load ones (and a vector memtable with the DB's
    # concurrent memtable writes refuses to open at all).
    return Rdict(str(path), options, column_families={"default": options})


def _write_options() -> WriteOptions:
    wo = WriteOptions()
    wo.disable_wal = True
    return wo


def check_layout(path: pathlib.Path, layout: str, store_name: str) -> None:
    """Ensure `path` holds (or will hold) a store of `layout`; create the marker if new.

    The marker is written before RocksDB creates anything, so a directory with RocksDB files and
    no marker was not created by this code and is refused rather than misread.
    """
    marker = path / LAYOUT_FILE
    if marker.exists():
        try:
            found = json.loads(marker.read_text())["layout"]
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreLayoutError(
                f"state store {store_name!r}: unreadable layout marker {marker}: {exc}"
            ) from None
        if found != layout:
            raise StoreLayoutError(
                f"state store {store_name!r}: directory {path} was created with layout {found!r}, "
                f"cannot open it as {layout!r} (was the store's type changed? wipe the task "
                "directory to rebuild it from the changelog)"
            )
        return
    if path.exists() and any(path.iterdir()):
        raise StoreLayoutError(
            f"state store {store_name!r}: directory {path} is not empty and has no {LAYOUT_FILE} "
            f"marker; refusing to open it as {layout!r}"
        )
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / (LAYOUT_FILE + ".tmp")
    with open(tmp, "w") as fh:
        json.dump({"layout": layout, "format_version": 1}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, marker)
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def bulk_loading_leftovers(path: pathlib.Path) -> list[str]:
    """The bulk-load settings the newest OPTIONS file in `path` still records: what a process
    that died in bulk loading mode left behind (empty when there is no OPTIONS file)."""
    newest = None
    for entry in path.glob("OPTIONS-*"):
        try:
            number = int(entry.name.split("-", 1)[1])
        except ValueError:
            continue
        if newest is None or number > newest[0]:
            newest = (number, entry)
    if newest is None:
        return []
    try:
        lines = newest[1].read_text(errors="replace").splitlines()
    except OSError:
        return []
    left = []
    for line in lines:
        line = line.strip()
        if line == "disable_auto_compactions=true":
            left.append("automatic compactions off")
        elif line.startswith("memtable_factory=") and "SkipListFactory" not in line:
            left.append(f"memtable {line.split('=', 1)[1]}")
    return left


def _end_interrupted_bulk_loading(db: Rdict, path: pathlib.Path, store_name: str, left_before: list,
                                  check: bool = True) -> None:
    """After open: make sure the store is in normal mode although an interrupted restore left
    bulk-load options in the OPTIONS file (`left_before`, read before opening). Opening with the
    store's explicit options replaces them; this checks that RocksDB recorded normal options and
    switches compactions back on if not (a memtable kind cannot be changed on an open DB).
    Without `check` (a rocksdb.config.setter chose the options: what RocksDB recorded may be its
    choice) only the log line."""
    if left_before:
        log.info("state store %s: an interrupted restore left it in bulk loading mode (%s); "
                 "reopened with the store's options", store_name, ", ".join(left_before))
    left = bulk_loading_leftovers(path) if check else None
    if not left:
        return
    if any(item.startswith("memtable") for item in left):
        raise StateError(f"state store {store_name!r}: RocksDB at {path} opened with bulk-load "
                         f"options ({', '.join(left)}) instead of the store's own")
    db.set_options({"disable_auto_compactions": "false"})


def key_after(key: bytes) -> bytes:
    """The smallest key strictly greater than `key` in byte order."""
    return key + b"\x00"


def prefix_upper_bound(prefix: bytes) -> Optional[bytes]:
    """Smallest key greater than every key starting with `prefix` (None if there is none)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class RocksDBKeyValueStore(KeyValueStore):
    """A persistent bytes key-value store in `<task_dir>/rocksdb/<name>/`.

    Iterators returned by range/reverse_range/prefix_scan/all must be exhausted or closed (they
    are context managers); closing the store invalidates open iterators, and so does the start of
    bulk loading (a restore, during which nothing iterates).

    `pending_writes` (the default): puts and deletes wait as pending writes (see
    PENDING_WRITES_MAX_BYTES). A segmented store's engine passes False: its C scans read the
    RocksDB handle directly.
    """

    persistent = True
    layout = "kv-v1"
    # A plain attribute, not a property: the caching layer tests it on every get and put.
    is_open: bool = False

    def __init__(self, name: str, pending_writes: bool = True) -> None:
        if not name or not isinstance(name, str):
            raise StateError(f"store name must be a non-empty string, got {name!r}")
        self.name = name
        # key -> value (None: a delete) not yet in RocksDB, and what they count against
        # PENDING_WRITES_MAX_BYTES. Every change to them, and their write to RocksDB, holds
        # _pending_lock (an interactive query's range read on another thread writes them
        # down too); a point read looks without it (a dict read is atomic, and the dict is
        # replaced, never emptied in place, once written down).
        self._pending: dict = {}
        self._pending_bytes = 0
        self._pending_max_bytes = PENDING_WRITES_MAX_BYTES if pending_writes else 0
        self._pending_lock = threading.Lock()
        # The handle for reads and writes. None while closed and while bulk loading: every path
        # that finds None goes through _open_db(), which ends bulk loading first, so no read
        # ever sees the bulk-load memtable and the hot paths pay nothing for the mode.
        self._db: Optional[Rdict] = None
        self._bulk_db: Optional[Rdict] = None  # the handle while bulk loading (restore_batch only)
        self._path: Optional[pathlib.Path] = None
        self._write_opts = _write_options()
        self._iterators = IteratorTracker()
        self._bulk = _BULK_OFF
        self._restored_since_flush = 0
        self._bulk_batches = 0
        self._tail: Optional[tuple] = None  # (handle, its tailing iterator, thread): see scan()
        # Mode switches reopen the DB; a reader on another thread (interactive queries) that finds
        # the store bulk loading ends the mode under this lock rather than racing the switch.
        self._mode_lock = threading.RLock()
        # rocksdb.config.setter (state.rocksdb_config): the class open() found in the app's config
        # and that config; the open handle's (instance, options), whose close() follows the handle's
        self._setter_class: Optional[type] = None
        self._configs: Mapping[str, Any] = {}
        self._setter: Optional[tuple] = None

    # ---------------------------------------------------------------- lifecycle
    def init(self, context: StoreContext) -> None:
        self.open(context.store_dir(self.name), getattr(context, "config", None))
        context.register(self, self.restore_batch, logged=False)

    def open(self, path: "os.PathLike[str] | str", configs: Optional[Mapping[str, Any]] = None) -> None:
        """Open (creating if needed) the RocksDB directory at `path`; used by `init` and tools.
        `configs`: the app's config, where `rocksdb.config.setter` may name the class that sets
        this store's RocksDB options (state.rocksdb_config)."""
        if self._db is not None or self._bulk_db is not None:
            raise StateError(f"state store {self.name!r} is already open at {self._path}")
        try:
            self._setter_class = config_setter_class(configs)
        except ValueError as exc:
            raise StateError(f"state store {self.name!r}: {exc}") from None
        self._configs = configs if configs is not None else {}
        path = pathlib.Path(path)
        check_layout(path, self.layout, self.name)
        left = bulk_loading_leftovers(path)
        db = self._reopen(path, bulk_loading=False, action="open")
        try:
            _end_interrupted_bulk_loading(db, path, self.name, left, check=self._setter_class is None)
        except Exception:
            db.close()
            self._close_setter(quiet=True)
            raise
        self._db = db
        self._path = path
        self._bulk = _BULK_OFF
        self._restored_since_flush = 0
        self.is_open = True
        log.debug("opened RocksDB store %s at %s", self.name, path)

    def _reopen(self, path: pathlib.Path, bulk_loading: bool, action: str) -> Rdict:
        """A handle on `path` with the store's options: Eddy's, then the rocksdb.config.setter's,
        then, when `bulk_loading`, the restore's bulk-load ones."""
        options = rocksdb_options()
        self._configure(options, action)
        if bulk_loading:
            _apply_bulk_loading(options)
        try:
            db = _open_rdict(path, options)
        except Exception as exc:
            self._close_setter(quiet=True)
            raise StateError(f"state store {self.name!r}: cannot {action} RocksDB at {path}: {exc}") from exc
        db.set_write_options(self._write_opts)
        return db

    def _configure(self, options: Options, action: str) -> None:
        """A new rocksdb.config.setter instance's set_config on `options` (nothing without one);
        the handle about to open owns it until _close_setter."""
        cls = self._setter_class
        if cls is None:
            return
        try:
            setter = cls()
            setter.set_config(self.name, options, self._configs)
        except Exception as exc:
            raise StateError(f"state store {self.name!r}: cannot {action} RocksDB: {ROCKSDB_CONFIG_SETTER} "
                             f"{cls.__qualname__} failed to set its options: {exc!r}") from exc
        self._setter = (setter, options)

    def _close_setter(self, quiet: bool = False) -> None:
        """After the handle closed: its rocksdb.config.setter's close(store name, options). A
        failure raises StateError naming the store, or with `quiet` (another error is on its way)
        is logged."""
        owned, self._setter = self._setter, None
        close = getattr(owned[0], "close", None) if owned is not None else None
        if close is None:
            return
        try:
            close(self.name, owned[1])
        except Exception as exc:
            error = StateError(f"state store {self.name!r}: {ROCKSDB_CONFIG_SETTER} "
                               f"{type(owned[0]).__qualname__}.close failed: {exc!r}")
            if not quiet:
                raise error from exc
            log.error("%s", error)

    @property
    def path(self) -> Optional[pathlib.Path]:
        return self._path

    def _open_db(self) -> Rdict:
        """The handle for reads and writes, with every pending write in RocksDB; ends bulk
        loading first if the store is in it."""
        db = self._db
        if db is None:
            with self._mode_lock:
                if self._bulk_db is not None:
                    self._end_bulk_loading(_BULK_DONE)
                db = self._db
            if db is None:
                raise StoreClosedError(f"state store {self.name!r} is not open")
        if self._pending:
            with self._pending_lock:
                self._write_pending(db)
        return db

    def _write_pending(self, db: Rdict) -> None:
        """The pending writes to RocksDB as one batch (under _pending_lock). On failure they stay
        pending and StateError names the store."""
        pending = self._pending
        if not pending:
            return
        # one or two go down directly: a WriteBatch of one costs more than two puts (1.45 us
        # against 0.62 us a put), and a processor that writes a key and then range-reads leaves one
        direct = len(pending) <= _DIRECT_WRITES
        target = db if direct else WriteBatch(raw_mode=True)
        put, delete = target.put, target.delete
        try:
            for key, value in pending.items():
                if value is None:
                    delete(key)
                else:
                    put(key, value)
            if not direct:
                db.write(target, self._write_opts)
        except Exception as exc:
            raise StateError(f"state store {self.name!r}: cannot write {len(pending)} pending writes to "
                             f"RocksDB at {self._path}: {exc}") from exc
        # replaced, not cleared: a reader on another thread may hold the old dict, whose values
        # are in RocksDB now
        self._pending = {}
        self._pending_bytes = 0

    def flush(self) -> None:
        """Flush memtables to SST files (the WAL is off, so this is what makes writes durable)."""
        db = self._open_db()  # ends bulk loading (which flushes)
        self._tail = None
        self._bulk = _BULK_OFF
        self._restored_since_flush = 0
        db.flush(True)

    def close(self, dirty: bool = False) -> None:
        with self._mode_lock:
            db = self._db or self._bulk_db
            if db is None:
                self._pending = {}
                self._pending_bytes = 0
                return
            failed = True
            try:
                # the memtables reach disk at close, dirty or not (below): the pending writes too
                if self._pending and self._db is not None:
                    with self._pending_lock:
                        self._write_pending(self._db)
                failed = False
            finally:
                self._drop_handle()
                # Closing flushes the memtables (the WAL is off), bulk-load ones included; the next
                # open passes the store's own options, which ends bulk loading for good.
                try:
                    db.close()
                except BaseException:
                    self._close_setter(quiet=True)
                    raise
                finally:
                    log.debug("closed RocksDB store %s", self.name)
                self._close_setter(quiet=failed)

    @property
    def bulk_loading(self) -> bool:
        """Whether a large restore has put the store in bulk loading mode (see BULK_LOAD_*)."""
        return self._bulk_db is not None

    def start_bulk_loading(self, records_expected: int) -> None:
        """A restore of up to `records_expected` records starts (the changelog reader calls it):
        a large one starts in bulk loading mode at once rather than after
        BULK_LOAD_MIN_RECORDS records in the normal memtable."""
        if records_expected >= BULK_LOAD_MIN_RECORDS and self._bulk == _BULK_OFF:
            self._start_bulk_loading(self._open_db())

    def end_bulk_loading(self) -> None:
        """Leave bulk loading mode now (the changelog reader calls it when the store's restore
        completes, before the task serves reads); a no-op in any other mode."""
        if self._bulk_db is not None:
            with self._mode_lock:
                if self._bulk_db is not None:
                    self._end_bulk_loading(_BULK_DONE)

    def _start_bulk_loading(self, db: Rdict) -> Rdict:
        """Flush, close and reopen with the bulk-load options; returns the handle to write to."""
        with self._mode_lock:
            path = self._path
            self._iterators.invalidate_all()  # they read the handle that is about to close
            self._tail = None
            self._db = None
            self._flush_and_close(db, "start bulk loading in")
            try:
                bulk_db = self._reopen(path, bulk_loading=True, action="start bulk loading in")
            except StateError as exc:
                log.warning("%s; restoring without bulk loading", exc)
                self._bulk = _BULK_DONE
                self._db = self._reopen_or_close(path, "reopen after failing to start bulk loading in")
                return self._db
            self._bulk_db = bulk_db
            self._bulk = _BULK_ON
            self._bulk_batches = 0
            log.debug("state store %s: bulk loading on", self.name)
            return bulk_db

    def _compact_while_bulk_loading(self, db: Rdict) -> None:
        """Level 0 is full: automatic compactions back on, in the background, while the restore
        goes on into the vector memtable (compactions read files, never the memtable)."""
        try:
            db.set_options({"disable_auto_compactions": "false"})
        except Exception as exc:  # noqa: BLE001 - the end of the mode switches them on anyway
            log.warning("state store %s: cannot switch compactions back on while bulk loading: %s",
                        self.name, exc)
            with self._mode_lock:
                if self._bulk_db is db:
                    self._end_bulk_loading(_BULK_DONE)
            return
        self._bulk = _BULK_COMPACTING
        log.debug("state store %s: level 0 is full; compacting while bulk loading", self.name)

    def _end_bulk_loading(self, then: int) -> None:
        """Flush the bulk-load memtables, close and reopen with the store's own options (under
        _mode_lock). A failure leaves the store closed and raises StateError."""
        bulk_db = self._bulk_db
        self._bulk_db = None
        self._bulk = then
        self._flush_and_close(bulk_db, "end bulk loading in")
        self._db = self._reopen_or_close(self._path, "end bulk loading in")
        log.debug("state store %s: bulk loading off", self.name)

    def _flush_and_close(self, db: Rdict, action: str) -> None:
        # The WAL is off: what the memtables hold must reach disk before the handle closes.
        try:
            try:
                db.flush(True)
            finally:
                db.close()
        except Exception as exc:
            self._close_setter(quiet=True)
            self._drop_handle()
            raise StateError(f"state store {self.name!r}: cannot {action} RocksDB at {self._path}: "
                             f"{exc}") from exc
        try:
            self._close_setter()
        except StateError:
            self._drop_handle()
            raise

    def _reopen_or_close(self, path: pathlib.Path, action: str) -> Rdict:
        try:
            return self._reopen(path, bulk_loading=False, action=action)
        except StateError:
            self._drop_handle()
            raise

    def _drop_handle(self) -> None:
        """Forget the handle (closed, or lost to a failure) and what hangs on it: iterators, the
        tailing iterator, the modes, the pending writes (after a failure the changelog has them:
        the store is restored before it is used again)."""
        self._pending = {}
        self._pending_bytes = 0
        self._iterators.invalidate_all()
        self._tail = None
        self._db = self._bulk_db = None
        self.is_open = False
        self._bulk = _BULK_OFF
        self._restored_since_flush = 0

    # ---------------------------------------------------------------- point ops
    # get and put are the hot path: the checks are inlined and call the validators only for a
    # value that is about to fail them.
    def get(self, key: bytes) -> Optional[bytes]:
        db = self._db
        if db is None:
            db = self._open_db()
        if type(key) is not bytes:
            check_key(self.name, key)
        pending = self._pending
        if pending:
            value = pending.get(key, _ABSENT)
            if value is not _ABSENT:
                return value
        return db.get(key)

    def put(self, key: bytes, value: Optional[bytes], timestamp: Optional[int] = None) -> None:
        db = self._db
        if db is None:
            db = self._open_db()
        if type(key) is not bytes:
            check_key(self.name, key)
        if value is not None and type(value) is not bytes:
            check_value(self.name, value)
        if not self._pending_max_bytes:
            if value is None:
                db.delete(key)
            else:
                db.put(key, value)
            return
        lock = self._pending_lock
        lock.acquire()
        try:
            pending = self._pending
            old = pending.get(key, _ABSENT)
            pending[key] = value
            size = self._pending_bytes + (len(value) if value is not None else 0)
            if old is _ABSENT:
                size += len(key) + PENDING_ENTRY_OVERHEAD
            elif old is not None:
                size -= len(old)
            self._pending_bytes = size
            if size > self._pending_max_bytes:
                self._write_pending(db)
        finally:
            lock.release()

    def put_if_absent(self, key: bytes, value: Optional[bytes], timestamp: Optional[int] = None):
        check_key(self.name, key)
        existing = self.get(key)
        if existing is None and value is not None:
            self.put(key, value)
        return existing

    def put_all(self, entries: Iterable[tuple], timestamp: Optional[int] = None) -> None:
        db = self._open_db()
        batch = WriteBatch(raw_mode=True)
        name = self.name
        for key, value in entries:
            if type(key) is not bytes:
                check_key(name, key)
            if value is None:
                batch.delete(key)
            else:
                if type(value) is not bytes:
                    check_value(name, value)
                batch.put(key, value)
        db.write(batch, self._write_opts)

    def delete(self, key: bytes, timestamp: Optional[int] = None) -> Optional[bytes]:
        check_key(self.name, key)
        old = self.get(key)
        if old is not None:
            self.put(key, None)
        return old

    def delete_range(self, key_from: bytes, key_to_exclusive: bytes) -> None:
        """Remove every key in [key_from, key_to_exclusive) with one range tombstone."""
        self._open_db().delete_range(key_from, key_to_exclusive, self._write_opts)

    # ---------------------------------------------------------------- restore (hot path)
    def restore_batch(self, records: list) -> None:
        """Apply restored changelog records as ONE WriteBatch with the WAL off.

        No validation here: changelog keys were validated when they were first written.
        """
        db = self._bulk_db
        if db is None:
            db = self._open_db()
        if type(records) is not list:
            records = list(records)
        batch = WriteBatch(raw_mode=True)
        put = batch.put
        remaining = iter(records)
        # The puts run from C (starmap drained by a zero-length deque): no Python loop per
        # record. A tombstone makes put raise ValueError (raw mode takes only bytes) without
        # adding anything; every earlier record added exactly one operation, so the batch's
        # length is the failing record's index. The rest of such a batch goes through the
        # plain loop, so a batch full of tombstones costs one exception, not one each.
        try:
            _drain(starmap(put, remaining))
        except ValueError:
            key, value = records[batch.len()]
            if value is not None:
                raise
            delete = batch.delete
            delete(key)
            for key, value in remaining:
                if value is None:
                    delete(key)
                else:
                    put(key, value)
        db.write(batch, self._write_opts)
        bulk = self._bulk
        if bulk == _BULK_ON:
            self._bulk_batches += 1
            if (self._bulk_batches % BULK_LOAD_CHECK_EVERY == 0
                    and (db.property_int_value(_L0_FILES) or 0) >= BULK_LOAD_MAX_L0_FILES):
                self._compact_while_bulk_loading(db)
        elif bulk == _BULK_OFF:
            self._restored_since_flush += len(records)
            if self._restored_since_flush >= BULK_LOAD_MIN_RECORDS:
                self._start_bulk_loading(db)

    # ---------------------------------------------------------------- iteration
    def _forward(self, db: Rdict, key_from: Optional[bytes], upper_exclusive: Optional[bytes]) -> Iterator:
        read_opts = ReadOptions()
        if upper_exclusive is not None:
            read_opts.set_iterate_upper_bound(upper_exclusive)
        items = db.items(from_key=key_from, read_opt=read_opts) if key_from is not None else db.items(
            read_opt=read_opts
        )
        try:
            yield from items
        finally:
            del items  # drops the RocksDB iterator now, not at some later GC

    def _backward(self, db: Rdict, key_from: Optional[bytes], key_to: Optional[bytes]) -> Iterator:
        # rocksdict's iterate_lower_bound is not honoured by seek_for_prev, so the lower bound is
        # checked here; the upper bound is the seek position.
        items = db.items(backwards=True, from_key=key_to) if key_to is not None else db.items(backwards=True)
        try:
            if key_from is None:
                yield from items
            else:
                for item in items:
                    if item[0] < key_from:
                        return
                    yield item
        finally:
            del items

    def range(self, key_from: Optional[bytes], key_to: Optional[bytes]) -> KeyValueIterator:
        db = self._open_db()
        if not checked_range_bounds(self.name, key_from, key_to, log):
            return KeyValueIterator(iter(()), self.name)
        upper = key_after(key_to) if key_to is not None else None
        return self._iterators.track(self._forward(db, key_from, upper), self.name)

    def reverse_range(self, key_from: Optional[bytes], key_to: Optional[bytes]) -> KeyValueIterator:
        db = self._open_db()
        if not checked_range_bounds(self.name, key_from, key_to, log):
            return KeyValueIterator(iter(()), self.name)
        return self._iterators.track(self._backward(db, key_from, key_to), self.name)

    def prefix_scan(self, prefix: bytes) -> KeyValueIterator:
        db = self._open_db()
        check_key(self.name, prefix, "prefix")
        return self._iterators.track(self._forward(db, prefix, prefix_upper_bound(prefix)), self.name)

    def all(self) -> KeyValueIterator:
        return self.range(None, None)

    def reverse_all(self) -> KeyValueIterator:
        return self.reverse_range(None, None)

    def scan(self, lower: bytes, upper_exclusive: bytes) -> list:
        """Every (key, value) in [lower, upper_exclusive), read at once (no iterator left open
        to the caller): for the short ranges of segmented stores built on this one (through
        `scan_iterator`)."""
        it = self.scan_iterator()
        it.seek(lower)
        found = []
        valid, key, value, step = it.valid, it.key, it.value, it.next
        while valid():
            k = key()
            if k >= upper_exclusive:
                break
            found.append((k, value()))
            step()
        return found

    def scan_iterator(self) -> Any:
        """The RocksDB iterator short scans seek (`scan`, and segmented stores' own loops): one
        tailing iterator kept for the handle (a seek on it sees every write made since, and
        costs no iterator creation per scan). A tailing iterator does not see range deletions
        (delete_range), so a range read with it must not overlap one: the segmented stores
        delete only expired segments and read only live ones. It is dropped at flush (so it
        pins no replaced files past a commit), at close and whenever the handle changes; it is
        the stream thread's: on another thread (an interactive query) this gives a new
        iterator each time."""
        db = self._db
        if db is None or self._pending:
            db = self._open_db()
        tail = self._tail
        thread = _get_ident()
        if tail is None or tail[0] is not db:
            read_opts = ReadOptions()
            read_opts.set_tailing(True)
            tail = self._tail = (db, db.iter(read_opts), thread)
        return tail[1] if tail[2] == thread else db.iter()

    def raw_range(self, lower: Optional[bytes], upper_exclusive: Optional[bytes], reverse: bool = False) -> Iterator:
        """Untracked generator over [lower, upper_exclusive) for segmented stores built on this one."""
        db = self._open_db()
        if not reverse:
            return self._forward(db, lower, upper_exclusive)
        return self._backward_exclusive(db, lower, upper_exclusive)

    def _backward_exclusive(self, db: Rdict, lower: Optional[bytes], upper_exclusive: Optional[bytes]) -> Iterator:
        read_opts = ReadOptions()
        if upper_exclusive is not None:
            read_opts.set_iterate_upper_bound(upper_exclusive)
        items = db.items(backwards=True, read_opt=read_opts)
        try:
            if lower is None:
                yield from items
            else:
                for item in items:
                    if item[0] < lower:
                        return
                    yield item
        finally:
            del items

    def track(self, source: Iterator) -> KeyValueIterator:
        return self._iterators.track(source, self.name)

    def num_open_iterators(self) -> int:
        return len(self._iterators)

    def approximate_num_entries(self) -> int:
        """RocksDB's estimate-num-keys property (can over-count overwrites and deletes)."""
        return self._open_db().property_int_value(ESTIMATE_NUM_KEYS) or 0

    def create_checkpoint(self, dest: "os.PathLike[str] | str") -> None:
        """A consistent RocksDB checkpoint (hard-linked SSTs) at `dest`, for exporters."""
        from rocksdict import Checkpoint

        db = self._open_db()
        db.flush(True)
        Checkpoint(db).create_checkpoint(str(dest))
