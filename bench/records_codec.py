"""Per-record cost of the Kafka v2 record codec: pure Python vs the C accelerator.

Run: cd /work/main && /work/venv/bin/python bench/records_codec.py [--records N] [--value-size B]

Prints microseconds per record for encode (encode_batch), decode to Record
(RecordBatch.records) and decode to confluent_kafka.Message (decode_messages over a
fetch-sized buffer), for both implementations, and the speed-up ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Message  # noqa: E402

from replication import records  # noqa: E402
from replication.records import decode_batches, encode_batch  # noqa: E402


def best_of(fn, repeat: int) -> float:
    """Fastest of `repeat` runs, in seconds (the least disturbed by other processes)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per run")
    parser.add_argument("--batch", type=int, default=500, help="records per batch")
    parser.add_argument("--fetch", type=int, default=5000,
                        help="records per decode_messages call (one fetch response's worth)")
    parser.add_argument("--value-size", type=int, default=100, help="value bytes")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    n, per_batch = args.records, args.batch
    value = b"v" * args.value_size
    recs = [(b"key-%08d" % i, value, 1_700_000_000_000 + i) for i in range(n)]
    chunks = [recs[i : i + per_batch] for i in range(0, n, per_batch)]
    encoded = [encode_batch(c, base_offset=i * per_batch, partition_leader_epoch=1)
               for i, c in enumerate(chunks)]
    batches = decode_batches(b"".join(encoded))
    # Fetch-sized buffers decoded one after the other, each result dropped before the next as a
    # consumer does: decoding everything into one huge live list would measure cache misses.
    per_fetch = max(1, args.fetch // per_batch)
    fetches = [b"".join(encoded[i : i + per_fetch]) for i in range(0, len(encoded), per_fetch)]

    accel = records._accel
    impls = {"python": (records._py_encode_records, records._py_decode_records,
                        records._py_decode_messages)}
    if accel is not None:
        impls["c"] = (accel.encode_records, accel.decode_records, accel.decode_messages)
    else:
        print("C accelerator not built: python only (build with `python setup.py build_ext --inplace`)")

    results: dict[str, dict[str, float]] = {}
    for name, (enc, dec, dec_msgs) in impls.items():
        def run_encode(enc=enc):
            for c in chunks:
                records._encode_records = enc
                encode_batch(c)

        def run_decode(dec=dec):
            records._decode_records = dec
            for b in batches:
                b.records()

        def run_messages(dec_msgs=dec_msgs):
            total = 0
            for fetch in fetches:
                msgs, _next = dec_msgs(fetch, "topic", 0, 0, Message)
                total += len(msgs)
            assert total == n

        saved = records._encode_records, records._decode_records
        try:
            results[name] = {
                "encode": best_of(run_encode, args.repeat) / n * 1e6,
                "decode -> Record": best_of(run_decode, args.repeat) / n * 1e6,
                "decode -> Message": best_of(run_messages, args.repeat) / n * 1e6,
            }
        finally:
            records._encode_records, records._decode_records = saved

    def run_message_alone():
        for f in range(0, n, args.fetch):
            [Message("topic", 0, i, b"k", value, None, None, (1, 0), -1.0, 1)
             for i in range(f, min(n, f + args.fetch))]

    msg_alone = best_of(run_message_alone, args.repeat) / n * 1e6

    print(f"{n} records, {per_batch} per batch, {args.fetch} per fetch, {args.value_size}-byte values; "
          f"us/record (best of {args.repeat})")
    header = f"{'operation':<20}" + "".join(f"{k:>10}" for k in results) + ("     ratio" if "c" in results else "")
    print(header)
    for op in ("encode", "decode -> Record", "decode -> Message"):
        line = f"{op:<20}" + "".join(f"{results[k][op]:>10.3f}" for k in results)
        if "c" in results:
            line += f"{results['python'][op] / results['c'][op]:>9.1f}x"
        print(line)
    print(f"(Message(...) from a Python list comprehension alone: {msg_alone:.3f} us/record)")
    if "c" in results:
        print(f"C: {1 / results['c']['decode -> Message']:.2f} M messages/s, "
              f"{1 / results['c']['encode']:.2f} M records/s encoded")


if __name__ == "__main__":
    main()
