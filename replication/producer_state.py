"""Per-partition producer state: Kafka's ProducerStateManager and ProducerAppendInfo.

For every producer id that wrote to a log we keep its epoch, the metadata of its last five
batches (duplicate detection) and the first offset of its open transaction. The leader
validates each append against it:

- an epoch older than the producer's current one: INVALID_PRODUCER_EPOCH;
- a sequence that does not follow the last one (same epoch): OUT_OF_ORDER_SEQUENCE_NUMBER;
  a new epoch must start at sequence 0; a producer id never seen accepts any sequence;
- a batch equal to one of the last five (same epoch, same sequence range) is a duplicate:
  nothing is appended and the first append's offsets are answered (Kafka's broker does the
  same, so a retried idempotent produce is acknowledged, not written twice);
- a non-transactional batch while the producer has an open transaction: INVALID_TXN_STATE.

Control batches (COMMIT/ABORT markers) complete a producer's open transaction; a marker with
an older epoch than the producer's is refused. Aborted transactions go to the aborted
transactions index (Kafka's ``.txnindex`` idea) that read_committed fetches query.

The last stable offset is min(first offset of the open transactions, first offset of the
completed transactions whose marker is not yet below the high watermark, high watermark):
a transaction is stable only once its marker is replicated (Kafka's "unreplicated txns").

Persistence: a snapshot ``producer-state.snapshot`` (JSON, written atomically and fsynced) at
every segment roll and at clean close, holding the producers, the open transactions and the
aborted transactions index up to the snapshot offset. Opening a log loads the snapshot and
scans the batch headers after it (headers only; control batches read their one record);
without a usable snapshot the whole log's headers are scanned. Truncation drops a snapshot
above the truncation point and rebuilds by scanning.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from bisect import bisect_left
from typing import Callable, Iterable, NamedTuple

from replication.epoch import write_checkpoint_atomically
from replication.errors import ReplicationError
from replication.protocol import AbortedTransaction, Errors
from replication.records import NO_PRODUCER_EPOCH, BatchHeader, ControlType, decode_records

log = logging.getLogger(__name__)

__all__ = [
    "AbortedTxn", "BatchMetadata", "CompletedTxn", "DuplicateBatch", "InvalidProducerEpochError",
    "InvalidTxnStateError", "OutOfOrderSequenceError", "ProducerStateEntry", "ProducerStateError",
    "ProducerStateManager", "SNAPSHOT_FILE",
]

SNAPSHOT_FILE = "producer-state.snapshot"
SNAPSHOT_VERSION = 1
NUM_BATCHES_TO_RETAIN = 5
_INT_MAX = 0x7FFFFFFF
_CONTROL_KEY = struct.Struct(">hh")


# --- errors ------------------------------------------------------------------------------------


class ProducerStateError(ReplicationError):
    """An append refused by producer-state validation; ``error_code`` is Kafka's code."""

    error_code: Errors = Errors.CORRUPT_MESSAGE


class OutOfOrderSequenceError(ProducerStateError):
    error_code = Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(ProducerStateError):
    error_code = Errors.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(ProducerStateError):
    error_code = Errors.INVALID_TXN_STATE


# --- state -------------------------------------------------------------------------------------


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


class AbortedTxn(NamedTuple):
    """An entry of the aborted transactions index (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class DuplicateBatch(NamedTuple):
    """The offsets a duplicate batch was first written at."""

    first_offset: int
    last_offset: int


class ProducerStateEntry:
    """What a log knows about one producer id."""

    __slots__ = ("producer_id", "producer_epoch", "batches", "current_txn_first_offset")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH,
                 batches: list[BatchMetadata] | None = None, current_txn_first_offset: int = -1) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches = batches if batches is not None else []
        self.current_txn_first_offset = current_txn_first_offset

    def copy(self) -> "ProducerStateEntry":
        return ProducerStateEntry(self.producer_id, self.producer_epoch, list(self.batches),
                                  self.current_txn_first_offset)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def maybe_update_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, first_seq: int, last_seq: int, first_offset: int, last_offset: int) -> None:
        self.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset))
        if len(self.batches) > NUM_BATCHES_TO_RETAIN:
            del self.batches[0]

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(id={self.producer_id}, epoch={self.producer_epoch}, "
                f"last_seq={self.last_seq}, txn_first_offset={self.current_txn_first_offset})")


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT_MAX)


def control_type_of(batch: bytes, header: BatchHeader) -> ControlType:
    """The marker type of a control batch (`batch` holds exactly that batch)."""
    recs = decode_records(batch, header)
    key = recs[0].key if recs else None
    if key is None or len(key) < 4:
        raise InvalidTxnStateError(f"control batch at offset {header.base_offset} has no control key")
    return ControlType(_CONTROL_KEY.unpack_from(key)[1])


class _Staged:
    """Validated changes of one append, applied once the bytes are written."""

    __slots__ = ("entries", "completed")

    def __init__(self) -> None:
        self.entries: dict[int, ProducerStateEntry] = {}
        self.completed: list[CompletedTxn] = []


class ProducerStateManager:
    """Producer state of one log (see the module docstring). Not thread-safe on its own: the
    owning `Log` calls it with its lock held."""

    def __init__(self, log_dir: str) -> None:
        self.dir = log_dir
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.unreplicated: list[CompletedTxn] = []  # completed, marker not yet below the HW
        self.aborted: list[AbortedTxn] = []  # in marker (last offset) order
        self._aborted_lasts: list[int] = []

    @property
    def snapshot_path(self) -> str:
        return os.path.join(self.dir, SNAPSHOT_FILE)

    # -- validation and update ------------------------------------------------------------------

    @staticmethod
    def has_producer_batches(headers: list[BatchHeader]) -> bool:
        for h in headers:
            if h.producer_id >= 0:
                return True
        return False

    def prepare(self, headers: list[BatchHeader], buf, first_offset: int | None,
                validate: bool) -> tuple[DuplicateBatch | None, _Staged | None]:
        """Validate (leader) or just interpret (follower, recovery) the batches of one append.

        ``first_offset`` is the offset the leader assigns to the first batch (None: use the
        batches' own base offsets). Returns (duplicate, None) when the append repeats a batch
        already written, else (None, staged changes) for `commit`. Raises ProducerStateError.
        """
        staged = _Staged()
        entries = staged.entries
        offset = first_offset
        for h in headers:
            base = h.base_offset if offset is None else offset
            last = base + h.last_offset_delta
            if offset is not None:
                offset = last + 1
            pid = h.producer_id
            if pid < 0:
                continue
            entry = entries.get(pid)
            if entry is None:
                current = self.producers.get(pid)
                entry = current.copy() if current is not None else ProducerStateEntry(pid)
            epoch = h.producer_epoch
            if h.is_control:
                if validate and epoch < entry.producer_epoch:
                    raise InvalidProducerEpochError(
                        f"{self.dir}: transaction marker of producer {pid} has epoch {epoch}, older "
                        f"than the current epoch {entry.producer_epoch}")
                pos = h.position
                ctype = control_type_of(bytes(buf[pos:pos + h.size]), h)
                entry.maybe_update_epoch(epoch)
                if entry.current_txn_first_offset >= 0:
                    staged.completed.append(CompletedTxn(pid, entry.current_txn_first_offset, last,
                                                         ctype is ControlType.ABORT))
                    entry.current_txn_first_offset = -1
                entries[pid] = entry
                continue
            first_seq = h.base_sequence
            last_seq = h.last_sequence
            if validate:
                if first_seq >= 0:
                    current = self.producers.get(pid)
                    dup = current.find_duplicate(epoch, first_seq, last_seq) if current is not None else None
                    if dup is not None:
                        return DuplicateBatch(dup.first_offset, dup.last_offset), None
                self._check(entry, h, base)
            entry.maybe_update_epoch(epoch)
            entry.add_batch(first_seq, last_seq, base, last)
            if h.is_transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = base
            entries[pid] = entry
        return None, staged

    def _check(self, entry: ProducerStateEntry, h: BatchHeader, offset: int) -> None:
        pid = entry.producer_id
        epoch = h.producer_epoch
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"{self.dir}: producer {pid} epoch {epoch} at offset {offset} is older than the "
                f"current epoch {entry.producer_epoch}")
        first_seq = h.base_sequence
        if first_seq >= 0:
            if epoch != entry.producer_epoch:
                if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceError(
                        f"{self.dir}: producer {pid} starts epoch {epoch} at sequence {first_seq} "
                        f"(offset {offset}); a new epoch starts at 0")
            elif entry.batches and not _in_sequence(entry.last_seq, first_seq):
                raise OutOfOrderSequenceError(
                    f"{self.dir}: producer {pid} epoch {epoch} sent sequence {first_seq} at offset "
                    f"{offset}; expected {entry.last_seq + 1}")
        if not h.is_transactional and entry.current_txn_first_offset >= 0:
            raise InvalidTxnStateError(
                f"{self.dir}: producer {pid} wrote a non-transactional batch at offset {offset} "
                f"while its transaction from offset {entry.current_txn_first_offset} is open")

    def commit(self, staged: _Staged) -> None:
        """Apply the changes of a written append."""
        for pid, entry in staged.entries.items():
            self.producers[pid] = entry
            if entry.current_txn_first_offset >= 0:
                self.ongoing[pid] = entry.current_txn_first_offset
            else:
                self.ongoing.pop(pid, None)
        for txn in staged.completed:
            self.unreplicated.append(txn)
            if txn.is_aborted:
                others = [first for pid, first in self.ongoing.items() if first < txn.last_offset]
                lso = min(others) if others else txn.last_offset + 1
                self.aborted.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
                self._aborted_lasts.append(txn.last_offset)

    def first_unstable_offset(self) -> int | None:
        """First offset of the open transactions (what bounds the cleaner), or None."""
        return min(self.ongoing.values()) if self.ongoing else None

    def first_unreplicated_offset(self, high_watermark: int) -> int | None:
        """First offset of completed transactions whose marker is at or above the HW."""
        u = self.unreplicated
        if not u:
            return None
        kept = [t for t in u if t.last_offset >= high_watermark]
        if len(kept) != len(u):
            self.unreplicated = kept
        return min(t.first_offset for t in kept) if kept else None

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[AbortedTransaction]:
        """Aborted transactions that overlap [start_offset, upper_offset)."""
        i = bisect_left(self._aborted_lasts, start_offset)
        return [AbortedTransaction(t.producer_id, t.first_offset, t.last_offset)
                for t in self.aborted[i:] if t.first_offset < upper_offset]

    # -- rebuild --------------------------------------------------------------------------------

    def reset(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.aborted.clear()
        self._aborted_lasts.clear()

    def apply_scanned(self, batches: Iterable[tuple[BatchHeader, Callable[[], bytes]]]) -> None:
        """Replay batches read back from the log (no validation)."""
        for h, read in batches:
            if h.producer_id < 0:
                continue
            buf = read() if h.is_control else b""
            if h.is_control:
                h = _relocated(h)
            _dup, staged = self.prepare([h], buf, None, validate=False)
            self.commit(staged)

    def load(self, lg) -> None:
        """Rebuild from the snapshot (if it matches the log) and a scan of the batches after it."""
        self.reset()
        start = lg.log_start_offset
        leo = lg.log_end_offset
        offset = self._read_snapshot(start, leo)
        if offset is None:
            offset = start
        if offset < leo:
            self.apply_scanned(_scan(lg, offset))
        self.unreplicated.clear()  # what is on disk at open is treated as replicated

    def rebuild(self, lg) -> None:
        """After truncation: drop a snapshot above the new end and rebuild."""
        try:
            with open(self.snapshot_path, "rb") as f:
                snap_offset = json.loads(f.read()).get("offset", -1)
        except (OSError, ValueError):
            snap_offset = -1
        if snap_offset > lg.log_end_offset:
            self.delete_snapshot()
        self.load(lg)

    def delete_snapshot(self) -> None:
        try:
            os.unlink(self.snapshot_path)
        except FileNotFoundError:
            pass

    # -- snapshot -------------------------------------------------------------------------------

    def write_snapshot(self, offset: int, log_start_offset: int) -> None:
        """Persist the state as of ``offset`` (every batch below it is applied)."""
        aborted = [list(t) for t in self.aborted if t.last_offset >= log_start_offset]
        doc = {
            "version": SNAPSHOT_VERSION,
            "offset": offset,
            "producers": [[e.producer_id, e.producer_epoch, e.current_txn_first_offset,
                           [list(b) for b in e.batches]] for e in self.producers.values()],
            "aborted": aborted,
        }
        write_checkpoint_atomically(self.snapshot_path, json.dumps(doc, separators=(",", ":")))

    def _read_snapshot(self, log_start: int, leo: int) -> int | None:
        path = self.snapshot_path
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.warning("unreadable %s (%s): scanning the log instead", path, e)
            return None
        try:
            if doc["version"] != SNAPSHOT_VERSION:
                raise ValueError(f"version {doc['version']!r}")
            offset = int(doc["offset"])
            if not log_start <= offset <= leo:
                log.info("%s at offset %d is outside the log [%d, %d]: scanning instead",
                         path, offset, log_start, leo)
                return None
            for pid, epoch, txn_first, batches in doc["producers"]:
                self.producers[pid] = ProducerStateEntry(
                    pid, epoch, [BatchMetadata(*b) for b in batches], txn_first)
                if txn_first >= 0:
                    self.ongoing[pid] = txn_first
            for t in doc["aborted"]:
                self.aborted.append(AbortedTxn(*t))
                self._aborted_lasts.append(t[2])
        except (KeyError, ValueError, TypeError) as e:
            log.warning("malformed %s (%s): scanning the log instead", path, e)
            self.reset()
            return None
        return offset


def _relocated(h: BatchHeader) -> BatchHeader:
    """A copy of ``h`` positioned at 0 (its bytes are read on their own)."""
    import copy

    c = copy.copy(h)
    c.position = 0
    return c


def _scan(lg, from_offset: int):
    """(header, read bytes) of the batches of ``lg`` whose last offset is >= ``from_offset``."""
    for seg in lg.segments:
        if seg.next_offset <= from_offset:
            continue
        start = 0
        if seg.base_offset < from_offset:
            found = seg.translate_offset(from_offset)
            if found is None:
                continue
            start = found.position
        for h in seg.batches(start):
            yield h, (lambda seg=seg, h=h: seg.read_bytes(h.position, h.size))
