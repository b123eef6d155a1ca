"""Store snapshots: RocksDB checkpoints of a store's local shards plus a manifest.

A snapshot directory holds one sub-directory per shard (task) and `eddy-snapshot.json`::

    <dest>/
      eddy-snapshot.json     application id, store, store kind, serdes, raw-mode flag,
                             per shard: task id, partition, directory, changelog and the
                             changelog offset the shard holds; creation time
      0_0/ 0_1/ ...          RocksDB directories (raw mode), opened read-only by readers

A persistent store's shard is a RocksDB checkpoint (hard-linked SST files) made from the store's
own read-write handle: a checkpoint from a read-only or secondary handle would miss what is
still in the memtable (the write-ahead log is off). An in-memory store's shard is its contents
written into a new RocksDB directory, so every reader reads one format. Window and session
stores are snapshotted through their segmented engine; readers strip the segment prefix.

The manifest is written last (atomically, fsynced): a directory with shards and no manifest is an
interrupted snapshot, never a complete one.

This module holds the pieces that run at the commit boundary (`capture_shard`) and the manifest
format; the App-side orchestration is `streams.runtime.snapshots`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
import shutil
import time
from typing import Any, Callable, Optional

from state.errors import StateError

log = logging.getLogger(__name__)

MANIFEST_NAME = "eddy-snapshot.json"
FORMAT_VERSION = 1
KINDS = ("key_value", "window", "session")
#: Serde names readers decode; anything else is read only as raw bytes.
KNOWN_SERDES = ("BYTES", "STRING", "INT32", "INT64", "FLOAT", "DOUBLE", "JSON")


class SnapshotError(StateError):
    """Base of snapshot errors."""


class SnapshotManifestMissingError(SnapshotError):
    """A directory with shard directories but no `eddy-snapshot.json` (an interrupted snapshot)."""


class SnapshotManifestCorruptError(SnapshotError):
    """`eddy-snapshot.json` cannot be parsed or lacks a required field."""


class NotASnapshotError(SnapshotError):
    """The path is missing, not a directory, or holds something other than a snapshot."""


class StoreNotRawModeError(SnapshotError):
    """A shard was not written in rocksdict's raw mode (bytes keys and values)."""


class UnknownSerdeError(SnapshotError):
    """The manifest names a serde the reader cannot decode (read it raw instead)."""


@dataclasses.dataclass(frozen=True)
class ShardSnapshot:
    """One shard: `directory` is relative to the snapshot; `changelog_offset` is the offset of
    the last changelog record the shard contains (None: not logged, or nothing written yet)."""

    task_id: str
    partition: int
    directory: str
    changelog_topic: Optional[str] = None
    changelog_offset: Optional[int] = None
    entries: Optional[int] = None  # exact for in-memory shards, RocksDB's estimate otherwise


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A complete snapshot (its manifest); `path` is the snapshot directory."""

    path: str
    application_id: str
    store: str
    store_kind: str
    key_serde: str
    value_serde: str
    raw_mode: bool
    shards: tuple[ShardSnapshot, ...]
    created_ms: int
    num_partitions: Optional[int] = None
    window_size_ms: Optional[int] = None
    format_version: int = FORMAT_VERSION

    def shard_path(self, shard: ShardSnapshot) -> str:
        return os.path.join(self.path, shard.directory)

    def to_json(self) -> dict:
        body = dataclasses.asdict(self)
        body.pop("path")
        body["shards"] = [dataclasses.asdict(s) for s in self.shards]
        return body


# ------------------------------------------------------------------------------ manifest
def write_manifest(snapshot: Snapshot) -> str:
    """Write `eddy-snapshot.json` atomically (tmp, fsync, rename, fsync dir); returns its path."""
    directory = pathlib.Path(snapshot.path)
    path = directory / MANIFEST_NAME
    tmp = directory / (MANIFEST_NAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(snapshot.to_json(), fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(directory)
    return str(path)


def _fsync_dir(directory: "os.PathLike[str] | str") -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _looks_like_shard(path: pathlib.Path) -> bool:
    return path.is_dir() and (path / "CURRENT").exists()


def read_snapshot(path: "os.PathLike[str] | str") -> Snapshot:
    """The snapshot at `path`, validated. Raises NotASnapshotError, SnapshotManifestMissingError,
    SnapshotManifestCorruptError or StoreNotRawModeError, each naming the path."""
    directory = pathlib.Path(path)
    if not directory.is_dir():
        raise NotASnapshotError(f"{directory} is not a snapshot: "
                                f"{'not a directory' if directory.exists() else 'no such directory'}")
    manifest = directory / MANIFEST_NAME
    if not manifest.exists():
        if any(_looks_like_shard(p) for p in directory.iterdir()):
            raise SnapshotManifestMissingError(
                f"{directory} holds shard directories but no {MANIFEST_NAME}: an interrupted snapshot "
                "(take it again)")
        what = "a RocksDB directory" if (directory / "CURRENT").exists() else "no snapshot files"
        raise NotASnapshotError(f"{directory} is not a snapshot ({what}; expected {MANIFEST_NAME})")
    snap = _parse_manifest(manifest, directory)
    if not snap.raw_mode:
        raise StoreNotRawModeError(f"{directory}: store {snap.store!r} was not written in raw mode; "
                                   "only raw-mode (bytes) stores can be read")
    for s in snap.shards:
        shard_dir = directory / s.directory
        if not _looks_like_shard(shard_dir):
            raise SnapshotManifestCorruptError(f"{manifest}: shard {s.task_id} directory {shard_dir} "
                                               "is missing or not a RocksDB directory")
        check_raw_mode(shard_dir)
    return snap


def _parse_manifest(manifest: pathlib.Path, directory: pathlib.Path) -> Snapshot:
    try:
        body = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SnapshotManifestCorruptError(f"{manifest}: unreadable manifest: {exc}") from None
    try:
        if not isinstance(body, dict):
            raise TypeError(f"expected a JSON object, got {type(body).__name__}")
        version = body.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(f"format_version {version!r} (this reader knows {FORMAT_VERSION})")
        shards = tuple(ShardSnapshot(**s) for s in body["shards"])
        snap = Snapshot(
            path=str(directory), application_id=str(body["application_id"]), store=str(body["store"]),
            store_kind=str(body["store_kind"]), key_serde=str(body["key_serde"]),
            value_serde=str(body["value_serde"]), raw_mode=bool(body["raw_mode"]), shards=shards,
            created_ms=int(body["created_ms"]), num_partitions=body.get("num_partitions"),
            window_size_ms=body.get("window_size_ms"))
        if snap.store_kind not in KINDS:
            raise ValueError(f"store_kind {snap.store_kind!r} is not one of {KINDS}")
        for s in shards:
            if not isinstance(s.partition, int) or os.sep in s.directory or s.directory in ("", ".", ".."):
                raise ValueError(f"bad shard entry {s}")
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotManifestCorruptError(f"{manifest}: bad manifest: {type(exc).__name__}: {exc}") from None
    return snap


def check_raw_mode(shard_dir: "os.PathLike[str] | str") -> None:
    """Raise StoreNotRawModeError if rocksdict's config in `shard_dir` says it is not raw mode."""
    config = pathlib.Path(shard_dir) / "rocksdict-config.json"
    if not config.exists():
        return  # not written by rocksdict: RocksDB keys and values are bytes anyway
    try:
        raw = json.loads(config.read_text(encoding="utf-8")).get("raw_mode", False)
    except (OSError, ValueError, AttributeError) as exc:
        raise SnapshotManifestCorruptError(f"{config}: unreadable rocksdict config: {exc}") from None
    if not raw:
        raise StoreNotRawModeError(f"{shard_dir}: the RocksDB store was written by rocksdict outside raw "
                                   "mode (pickled keys and values); only raw-mode stores can be read")


# ------------------------------------------------------------------------------ capture
def unwrap(store: Any) -> Any:
    """The innermost bytes store under typed, caching and change-logging layers."""
    layer = store
    while getattr(layer, "wrapped", None) is not None:
        layer = layer.wrapped
    return layer


def store_kind(inner: Any) -> str:
    if hasattr(inner, "window_size_ms"):
        return "window"
    if hasattr(inner, "find_sessions"):
        return "session"
    return "key_value"


def serde_name(serde: Any) -> str:
    """The manifest name of a serde: a built-in's name, BYTES for none, else its own name."""
    if serde is None:
        return "BYTES"
    target = getattr(serde, "_target", None)  # a config default serde, bound at App start
    if target is not None:
        serde = target
    from state.timestamped import ValueAndTimestampSerde

    if isinstance(serde, ValueAndTimestampSerde):  # a timestamped store: its inner serde, bound
        return f"value_and_timestamp({serde_name(serde.inner)})"
    name = str(getattr(serde, "name", type(serde).__name__))
    return name.upper() if name.upper() in KNOWN_SERDES else name


def pre_flush(store: Any) -> None:
    """Flush the memtables of a persistent store from a thread other than its stream thread, so
    that the flush at the commit boundary (inside the pause) has little left to write. RocksDB's
    flush is thread-safe and runs without the GIL; a store closed meanwhile is skipped."""
    engine = getattr(unwrap(store), "_engine", None) or unwrap(store)
    db = getattr(engine, "_db", None)
    if db is None:
        return
    try:
        db.flush(True)
    except Exception as exc:  # noqa: BLE001 - an optimisation only; the boundary flushes anyway
        log.debug("pre-flush of store %s skipped: %s", getattr(store, "name", store), exc)


def pre_flush_all(stores: list, max_rounds: int = 4, settled_s: float = 0.02) -> None:
    """`pre_flush` every store, round after round until one takes under `settled_s` (at most
    `max_rounds`): what arrives during a long round is flushed by the next, shorter one, so the
    boundary's own flush finds only a small tail."""
    for _ in range(max_rounds):
        start = time.perf_counter()
        for store in stores:
            pre_flush(store)
        if time.perf_counter() - start < settled_s:
            return


def capture_shard(store: Any, dest: "os.PathLike[str] | str") -> Callable[[], Optional[int]]:
    """At a commit boundary (the stream thread paused): make the shard consistent at `dest`.

    A RocksDB store is checkpointed now (flush + hard links). An in-memory store's entries are
    copied now and written out by the returned finisher, which the caller runs after processing
    resumes; it returns the entry count (None when unknown)."""
    inner = unwrap(store)
    engine = getattr(inner, "_engine", inner)  # window and session stores keep a bytes engine
    dest = pathlib.Path(dest)
    if getattr(engine, "persistent", False):
        engine.create_checkpoint(dest)
        return lambda: None
    entries = list(engine.raw_range(None, None))  # sorted (key, value) pairs, copied in the pause

    def write_out() -> int:
        write_rocksdb(dest, entries)
        return len(entries)

    return write_out


def write_rocksdb(dest: "os.PathLike[str] | str", entries: list) -> None:
    """Write sorted `(key, value)` bytes pairs into a new raw-mode RocksDB directory."""
    from rocksdict import Options, Rdict, WriteBatch

    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    db = Rdict(str(dest), opts)
    try:
        batch = WriteBatch(raw_mode=True)
        for i, (key, value) in enumerate(entries):
            batch.put(key, value)
            if i % 50_000 == 49_999:
                db.write(batch)
                batch = WriteBatch(raw_mode=True)
        db.write(batch)
        db.flush(True)
    finally:
        db.close()


def new_snapshot_dir(base: "os.PathLike[str] | str", store: str) -> str:
    """A fresh `<base>/<store>-<ms>` directory name (not created)."""
    ms = int(time.time() * 1000)
    path = os.path.join(os.fspath(base), f"{store}-{ms:013d}")
    n = 1
    while os.path.exists(path):
        path = os.path.join(os.fspath(base), f"{store}-{ms:013d}.{n}")
        n += 1
    return path


def prune_snapshots(base: "os.PathLike[str] | str", store: str, keep: int) -> list[str]:
    """Delete all but the newest `keep` complete snapshots of `store` under `base`, and any
    interrupted (manifest-less) ones older than the newest complete one; returns what was removed."""
    root = pathlib.Path(base)
    if not root.is_dir():
        return []
    mine = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(f"{store}-"))
    complete = [p for p in mine if (p / MANIFEST_NAME).exists()]
    removed = []
    drop = set(complete[:-keep] if keep > 0 else complete)
    if complete:
        newest = complete[-1].name
        drop |= {p for p in mine if p not in complete and p.name < newest}
    for p in sorted(drop):
        shutil.rmtree(p, ignore_errors=True)
        removed.append(str(p))
    return removed
