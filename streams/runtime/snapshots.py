"""Store snapshots of a running App, taken at commit boundaries (see state.snapshot).

`App.snapshot(store, dest)` hands a request to every stream thread; each thread commits at its
next loop turn, and right after the commit, before it processes again, checkpoints the shards
of the store that its running tasks hold (`ThreadSnapshots.run`). At that moment the caches are
flushed, the changelog records are delivered (or the transaction committed), so a shard's
contents are exactly its changelog up to the offset the manifest records for it.

The pause is kept short: before asking, the caller flushes the stores' memtables from its own
thread (RocksDB's flush runs without the GIL while processing goes on), so the flush inside the
pause writes only what arrived since. In-memory stores are copied in the pause and written out by
the caller afterwards.

Periodic snapshots (`snapshot.interval.ms` > 0) run on their own thread: every interval each
store in `snapshot.stores` (default: all) is snapshotted into `snapshot.dir` (default
`<state.dir>/<application.id>-snapshots`), keeping the newest `snapshot.keep` (default 3).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from typing import Any, Optional

from state.errors import InvalidStateStoreError
from state.snapshot import (
    ShardSnapshot,
    Snapshot,
    SnapshotError,
    capture_shard,
    new_snapshot_dir,
    pre_flush_all,
    prune_snapshots,
    serde_name,
    store_kind,
    unwrap,
    write_manifest,
)
from streams.errors import ConfigError

log = logging.getLogger(__name__)

INTERVAL_CONFIG = "snapshot.interval.ms"
DIR_CONFIG = "snapshot.dir"
KEEP_CONFIG = "snapshot.keep"
STORES_CONFIG = "snapshot.stores"
DEFAULT_KEEP = 3
#: How long `App.snapshot` waits for the stream threads to reach a commit boundary.
DEFAULT_TIMEOUT_S = 60.0


class _Request:
    """One snapshot of one store, answered by every stream thread that was alive when asked."""

    def __init__(self, store_name: str, dest: str, threads: list) -> None:
        self.store_name = store_name
        self.dest = dest
        self.waiting = set(threads)
        self.results: list[tuple[ShardSnapshot, Any]] = []  # (shard, finisher)
        self.errors: list[BaseException] = []
        self.pause_s = 0.0  # the longest pause of one thread
        self.cond = threading.Condition()

    def answer(self, thread: Any, results: list, error: Optional[BaseException], pause_s: float) -> None:
        with self.cond:
            self.results.extend(results)
            if error is not None:
                self.errors.append(error)
            self.pause_s = max(self.pause_s, pause_s)
            self.waiting.discard(thread)
            self.cond.notify_all()

    def wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while self.waiting:
                # a thread that died or stops before its next commit will never answer
                self.waiting = {t for t in self.waiting if t.is_alive() and not t.stopping}
                remaining = deadline - time.monotonic()
                if not self.waiting:
                    break
                if remaining <= 0:
                    raise SnapshotError(f"snapshot of store {self.store_name!r}: stream threads "
                                        f"{sorted(t.name for t in self.waiting)} did not reach a commit "
                                        f"boundary within {timeout_s}s")
                self.cond.wait(min(remaining, 0.1))


class ThreadSnapshots:
    """A stream thread's pending snapshot requests. `pending` is read on every loop turn."""

    __slots__ = ("pending", "_requests", "_lock")

    def __init__(self) -> None:
        self.pending = False
        self._requests: list[_Request] = []
        self._lock = threading.Lock()

    def submit(self, request: _Request) -> None:
        with self._lock:
            self._requests.append(request)
            self.pending = True

    def run(self, thread: Any) -> None:
        """On the stream thread, right after a commit: capture this thread's shards."""
        with self._lock:
            requests, self._requests = self._requests, []
            self.pending = False
        for request in requests:
            start = time.perf_counter()
            results: list = []
            error: Optional[BaseException] = None
            try:
                results = _capture_tasks(thread.task_manager, request)
            except Exception as exc:  # noqa: BLE001 - reported to the caller of App.snapshot
                log.exception("%s: snapshot of store %s failed", thread.name, request.store_name)
                error = exc
            request.answer(thread, results, error, time.perf_counter() - start)


def _capture_tasks(task_manager: Any, request: _Request) -> list:
    from streams.runtime.task import TaskState  # noqa: PLC0415 - task imports the engine

    results = []
    collector_offsets = None
    for task_id, task in list(task_manager.tasks.items()):
        if task.state is not TaskState.RUNNING:
            continue
        store = task.store(request.store_name)
        if store is None or task.manager is None:
            continue
        meta = task.manager.stores.get(request.store_name)
        topic, offset = None, None
        if meta is not None and meta.changelog_partition is not None:
            if collector_offsets is None and task.manager.collector is not None:
                collector_offsets = task.manager.collector.offsets()  # once: the tasks share it
            task.manager.refresh_changelog_offsets(collector_offsets or {})
            topic = meta.changelog_partition.topic
            offset = task.manager.store_offset(meta.changelog_partition)
        directory = str(task_id)
        finisher = capture_shard(store, os.path.join(request.dest, directory))
        results.append((ShardSnapshot(task_id=str(task_id), partition=task_id.partition, directory=directory,
                                      changelog_topic=topic, changelog_offset=offset), finisher))
    return results


def _positive_int(raw: dict, key: str, default: int, minimum: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"config {key!r} must be an int >= {minimum}, got {value!r}")
    return value


class AppSnapshots:
    """The App's side: `take()` for `App.snapshot`, and the periodic snapshot thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        raw = app.config.raw
        self.interval_ms = _positive_int(raw, INTERVAL_CONFIG, 0, 0)
        self.keep = _positive_int(raw, KEEP_CONFIG, DEFAULT_KEEP, 1)
        base = raw.get(DIR_CONFIG) or os.path.join(app.config.state_dir, f"{app.application_id}-snapshots")
        if not isinstance(base, (str, os.PathLike)):
            raise ConfigError(f"config {DIR_CONFIG!r} must be a path, got {base!r}")
        self.base_dir = os.fspath(base)
        stores = raw.get(STORES_CONFIG)
        if isinstance(stores, str):
            stores = [s.strip() for s in stores.split(",") if s.strip()]
        self.periodic_stores = list(stores) if stores else None  # None: every store
        if self.periodic_stores:
            unknown = [s for s in self.periodic_stores if s not in app._store_sub]
            if unknown:
                raise ConfigError(f"config {STORES_CONFIG!r} names unknown stores {unknown}; "
                                  f"the topology has {sorted(app._store_sub)}")
        self.last_pause_s = 0.0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ---- one snapshot -----------------------------------------------------------------------

    def take(self, store_name: str, dest: Optional[str] = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Snapshot:
        app = self.app
        sub = app._store_sub.get(store_name)
        if sub is None:
            raise InvalidStateStoreError(
                f"unknown state store {store_name!r}; the topology has {sorted(app._store_sub)}")
        if not app.state.is_running_or_rebalancing():
            raise InvalidStateStoreError(f"cannot snapshot store {store_name!r}: the app is "
                                         f"{app.state.value}, not RUNNING or REBALANCING")
        dest = os.path.abspath(os.fspath(dest) if dest is not None else new_snapshot_dir(self.base_dir, store_name))
        if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
            raise SnapshotError(f"snapshot destination {dest} exists and is not an empty directory")
        os.makedirs(dest, exist_ok=True)
        created_ms = int(time.time() * 1000)
        try:
            stores = app._local_stores(store_name, sub)
            pre_flush_all(list(stores.values()))
            sample = next(iter(stores.values()), None)
            threads = [t for t in list(app.threads) if t.is_alive() and not t.stopping]
            request = _Request(store_name, dest, threads)
            for thread in threads:
                thread.snapshots.submit(request)
            request.wait(timeout_s)
            if request.errors:
                raise SnapshotError(f"snapshot of store {store_name!r} failed: {request.errors[0]}") \
                    from request.errors[0]
            shards = []
            for shard, finisher in sorted(request.results, key=lambda r: r[0].partition):
                entries = finisher()
                shards.append(shard if entries is None else _with_entries(shard, entries))
            if sample is None:
                sample = self._any_store(store_name, sub)
            snapshot = self._manifest(store_name, sub, dest, sample, tuple(shards), created_ms)
            write_manifest(snapshot)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        self.last_pause_s = request.pause_s
        log.info("snapshot of store %s: %d shards in %s (longest pause %.1f ms)", store_name, len(shards), dest,
                 request.pause_s * 1000)
        return snapshot

    def _any_store(self, store_name: str, sub: int) -> Any:
        stores = self.app._local_stores(store_name, sub)
        return next(iter(stores.values()), None)

    def _manifest(self, store_name: str, sub: int, dest: str, store: Any, shards: tuple, created_ms: int) -> Snapshot:
        app = self.app
        inner = unwrap(store) if store is not None else None
        kind = store_kind(inner) if inner is not None else self._builder_kind(store_name)
        plan = getattr(app, "_plan", None)
        return Snapshot(
            path=dest, application_id=app.application_id, store=store_name, store_kind=kind,
            key_serde=serde_name(getattr(store, "key_serde", None)),
            value_serde=serde_name(getattr(store, "value_serde", None)),
            raw_mode=True, shards=shards, created_ms=created_ms,
            num_partitions=plan.partitions_of_sub[sub] if plan is not None else None,
            window_size_ms=getattr(inner, "window_size_ms", None))

    def _builder_kind(self, store_name: str) -> str:
        builder = self.app.topology.store_builder(store_name)
        if callable(getattr(builder, "store_builder", None)):
            builder = builder.store_builder()
        return getattr(builder, "kind", "key_value")

    # ---- periodic ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.interval_ms <= 0:
            return
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"{self.app.application_id}-snapshots")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(DEFAULT_TIMEOUT_S)

    def _loop(self) -> None:
        interval_s = self.interval_ms / 1000.0
        while not self._stop.wait(interval_s):
            app = self.app
            if app.state.value != "RUNNING":
                continue  # while rebalancing or restoring a snapshot would miss shards
            for store_name in self.periodic_stores or sorted(app._store_sub):
                if self._stop.is_set():
                    return
                try:
                    self.take(store_name)
                    prune_snapshots(self.base_dir, store_name, self.keep)
                except Exception as exc:  # noqa: BLE001 - the next interval tries again
                    log.warning("periodic snapshot of store %s failed: %s", store_name, exc)


def _with_entries(shard: ShardSnapshot, entries: int) -> ShardSnapshot:
    from dataclasses import replace  # noqa: PLC0415

    return replace(shard, entries=entries)
