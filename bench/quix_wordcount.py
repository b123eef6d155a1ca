"""Quix Streams' side of bench/wordcount_kafka.py: the same stateful word count.

Runs under Quix Streams 3.28.1 in its own virtualenv (it pins confluent-kafka < 2.13), started
by bench/wordcount_kafka.py. Reads text lines from `--input` (from the beginning, its own
consumer group), splits them into words, re-keys by word (Quix's group_by: a repartition
topic, as Eddy's group_by), counts per word in RocksDB state (changelog on, at-least-once) and
writes the counts to `--output`. Stops once it has counted `--words` words and prints one JSON
line: the wall-clock times of the first line processed and of the last word counted.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--words", type=int, required=True, help="stop after counting this many words")
    parser.add_argument("--commit-interval", type=float, default=5.0)
    args = parser.parse_args(argv)

    from quixstreams import Application

    app = Application(
        broker_address=args.bootstrap_servers,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        commit_interval=args.commit_interval,
        state_dir=args.state_dir,
        processing_guarantee="at-least-once",
        loglevel="WARNING",
        consumer_extra_config={"session.timeout.ms": 6000},
    )
    lines = app.topic(args.input, key_deserializer="string", value_deserializer="string")
    counts = app.topic(args.output, key_serializer="string", value_serializer="int")

    marks = {"first": None, "last": None, "counted": 0}

    def split(line: str) -> list[str]:
        if marks["first"] is None:
            marks["first"] = time.time()
        return line.split()

    def count(word: str, state) -> int:
        n = state.get("count", 0) + 1
        state.set("count", n)
        marks["counted"] += 1
        if marks["counted"] >= args.words and marks["last"] is None:
            marks["last"] = time.time()
            app.stop()
        return n

    sdf = app.dataframe(lines)
    sdf = sdf.apply(split, expand=True)
    sdf = sdf.group_by(lambda word: word, name="word", key_serializer="string", value_serializer="string",
                       key_deserializer="string", value_deserializer="string")
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(counts)
    app.run()

    print(json.dumps({"first": marks["first"], "last": marks["last"], "counted": marks["counted"]}), flush=True)
    return 0 if marks["last"] is not None else 1


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
