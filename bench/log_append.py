"""Benchmark: leader appends to a `Log` and reads back through `Log.read`, against a plain file.

    python bench/log_append.py [--records 1000000] [--value-size 100] [--batch 500] [--compact] [--profile]

Appends ``--records`` records (``--value-size``-byte values, null keys) in batches of ``--batch``
as leader (`Log.append_as_leader`), flushes, then reads everything back with `Log.read` in
~1 MiB chunks. Batches are encoded before the clock starts (that is the producer's work; its
rate is printed separately). With ``--compact`` the records have 10-byte keys, and the same
batches are also appended (without the final fsync) to a ``cleanup.policy=delete`` log and to a
``compact`` one, whose leader appends check every record for a key: ``log append (compact)`` is
printed with its ratio to ``log append (delete)``. Two read figures are printed:

* ``read (headers)``: the log's read path, walking every batch header to learn the next offset,
  so every record's bytes come through `Log.read` (what a follower fetch costs the leader);
* ``read (headers+CRC)``: the same, checking every batch's CRC-32C (what a consumer with
  ``check.crcs`` does);
* ``read (records)``: headers and CRCs plus decoding every record (key, value, offsets).

The plain-file baseline, in the same run: write the same encoded batches with one ``os.write``
each, fsync, then read the file back in 1 MiB ``os.read`` chunks. Ratios are log rate / plain
rate (target >= 0.5). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from replication.log import Log  # noqa: E402
from replication.records import decode_records, encode_batch, iter_batch_headers  # noqa: E402

CHUNK = 1 << 20


def encode_all(n_records: int, value_size: int, batch: int, keyed: bool = False) -> list[bytes]:
    ts = int(time.time() * 1000)
    value = b"v" * value_size
    out = []
    for start in range(0, n_records, batch):
        n = min(batch, n_records - start)
        if keyed:
            out.append(encode_batch([(b"key-%06d" % (i % 100_000), value, ts) for i in range(start, start + n)]))
        else:
            out.append(encode_batch([(None, value, ts)] * n))
    return out


def append_only(log: Log, batches: list[bytes]) -> None:
    append = log.append_as_leader
    for b in batches:
        append(b, 0)


def append_log(log: Log, batches: list[bytes]) -> None:
    append_only(log, batches)
    log.flush()


def read_log(log: Log, decode: bool, crc: bool = True) -> tuple[int, int]:
    offset = log.log_start_offset
    end = log.log_end_offset
    records = 0
    nbytes = 0
    while offset < end:
        data = log.read(offset, CHUNK).buffer
        nbytes += len(data)
        for h in iter_batch_headers(data, validate_crc=crc):
            records += h.records_count
            offset = h.next_offset
            if decode:
                # the records of this batch, from the chunk (no copy of the batch bytes)
                recs = decode_records(memoryview(data)[h.position:h.position + h.size], h)
                assert len(recs) == h.records_count
    return records, nbytes


def plain_write(path: str, batches: list[bytes]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for b in batches:
            os.write(fd, b)
        os.fsync(fd)
    finally:
        os.close(fd)


def plain_read(path: str) -> int:
    fd = os.open(path, os.O_RDONLY)
    total = 0
    try:
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                return total
            total += len(chunk)
    finally:
        os.close(fd)


def timed(fn, *args):
    t = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (best kept)")
    ap.add_argument("--compact", action="store_true",
                    help="keyed records; also append them to a cleanup.policy=compact log")
    ap.add_argument("--profile", action="store_true", help="cProfile the log append and read")
    args = ap.parse_args()

    t_enc, batches = timed(encode_all, args.records, args.value_size, args.batch, args.compact)
    total = sum(len(b) for b in batches)
    n = args.records
    mb = total / 1e6
    print(f"{n} records, {args.value_size}-byte values, {len(batches)} batches of {args.batch}, "
          f"{mb:.1f} MB encoded (producer-side encode: {n / t_enc:,.0f} records/s)")

    root = tempfile.mkdtemp(prefix="eddy-bench-", dir=args.dir)
    try:
        # Best of --repeat runs of each measurement: the machine is shared, and the best run is
        # the one least disturbed by other work.
        plain_path = os.path.join(root, "plain.bin")
        t_pw = t_pr = t_la = t_lr = t_lc = t_ld = t_ln = t_lk = float("inf")
        log = None
        prof = cProfile.Profile() if args.profile else None
        for _ in range(args.repeat):
            t, _ = timed(plain_write, plain_path, batches)
            t_pw = min(t_pw, t)
            t, got = timed(plain_read, plain_path)
            t_pr = min(t_pr, t)
            assert got == total
            if log is not None:
                log.close()
                shutil.rmtree(os.path.join(root, "bench-0"))
            log = Log(os.path.join(root, "bench-0"))
            if prof:
                prof.enable()
            t, _ = timed(append_log, log, batches)
            t_la = min(t_la, t)
            t, (recs_h, bytes_h) = timed(read_log, log, False, False)
            t_lr = min(t_lr, t)
            t, (recs_c, _) = timed(read_log, log, False, True)
            t_lc = min(t_lc, t)
            t, (recs_d, _) = timed(read_log, log, True)
            t_ld = min(t_ld, t)
            if args.compact:
                # The appends alone (no fsync, whose time varies most): delete log, then compact.
                for policy in ("delete", "compact"):
                    other = Log(os.path.join(root, f"{policy}-0"), {"cleanup.policy": policy})
                    t, _ = timed(append_only, other, batches)
                    if policy == "delete":
                        t_ln = min(t_ln, t)
                    else:
                        t_lk = min(t_lk, t)
                    assert other.log_end_offset == n
                    other.close()
                    shutil.rmtree(os.path.join(root, f"{policy}-0"))
            if prof:
                prof.disable()
            assert recs_h == n and recs_c == n and recs_d == n and bytes_h == total, (recs_h, recs_d, bytes_h, total)
        segments = log.num_segments
        log.close()

        def line(name, secs, base=None):
            ratio = f"   ratio vs plain {base / secs:.2f}" if base else ""
            print(f"  {name:<24}{n / secs:>14,.0f} records/s {mb / secs:>9,.1f} MB/s{ratio}")

        print(f"log: {segments} segment(s); best of {args.repeat} runs")
        line("plain file write+fsync", t_pw)
        line("log append+flush", t_la, t_pw)
        if args.compact:
            line("log append (delete)", t_ln)
            print(f"  {'log append (compact)':<24}{n / t_lk:>14,.0f} records/s {mb / t_lk:>9,.1f} MB/s"
                  f"   ratio vs delete {t_ln / t_lk:.2f}")
        line("plain file read", t_pr)
        line("log read (headers)", t_lr, t_pr)
        line("log read (headers+CRC)", t_lc, t_pr)
        line("log read (records)", t_ld, t_pr)
        if prof:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
