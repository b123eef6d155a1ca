"""A Spark export job over a running word count: `python -m examples.export_job`.

1. word count (examples.wordcount's topology) runs on the embedded cluster, exactly_once_v2,
   until every generated line is counted;
2. while it keeps running, `app.snapshot("counts")` takes a consistent snapshot of its store;
3. Spark reads the snapshot (`eddy_store`) and the store's changelog (`eddy_changelog`, read
   from the running cluster's files), and Spark SQL finds the top word of each first letter,
   joined with how many updates the changelog holds for it;
4. the result is written as Parquet and printed; the snapshot's counts are checked against a
   plain count of the generated text (exit status 1 on a mismatch).
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import tempfile
import time

from confluent_kafka.admin import NewTopic

from examples.wordcount import build_topology, generate_lines, wait_until
from streams import App, AppState
from streams.backends import for_config
from examples._common import embedded_bootstrap, fresh_data_dir

TOP_WORDS_SQL = """
WITH ranked AS (
  SELECT substr(key, 1, 1) AS letter, key AS word, value AS count,
         row_number() OVER (PARTITION BY substr(key, 1, 1) ORDER BY value DESC, key) AS rank
  FROM counts
), updates AS (
  SELECT key AS word, count(*) AS updates FROM changelog GROUP BY key
)
SELECT r.letter, r.word, r.count, u.updates
FROM ranked r JOIN updates u ON r.word = u.word
WHERE r.rank = 1
ORDER BY r.count DESC, r.letter
"""


def produce_lines(backend, topic: str, lines: list[str]) -> None:
    producer = backend.producer({"client.id": "export-job-generator"})
    for i, line in enumerate(lines):
        while True:
            try:
                producer.produce(topic, value=line.encode(), key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise SystemExit("export job: could not write the input within 60s")


def main(argv: list[str] | None = None, spark=None) -> int:
    """Run the job; `spark`: an existing SparkSession to use (left running), else one is made."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "eddy-export-job"),
                        help="where the cluster, the state, the snapshot and the output go (reset at start)")
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    data_dir = fresh_data_dir(args.data_dir)
    bootstrap = embedded_bootstrap(data_dir)
    backend = for_config({"bootstrap.servers": bootstrap})
    try:
        admin = backend.admin()
        for future in admin.create_topics([NewTopic(t, args.partitions, 3) for t in ("lines", "word-counts")]).values():
            future.result()
        lines = generate_lines(args.lines, args.seed)
        expected = collections.Counter(w for line in lines for w in line.split())
        produce_lines(backend, "lines", lines)
        print(f"generated {len(lines):,} lines ({len(expected)} distinct words) on {bootstrap}")

        app = App(build_topology("lines", "word-counts"), {
            "application.id": "wordcount", "bootstrap.servers": bootstrap, "state.dir": f"{data_dir}/state",
            "processing.guarantee": "exactly_once_v2", "replication.factor": 3})
        app.start()
        try:
            if not app.wait_for_state(AppState.RUNNING, timeout=args.timeout):
                raise SystemExit(f"export job: word count did not reach RUNNING ({app.state.value})")
            store = app.store("counts")
            wait_until(lambda: all(store.get(w) == n for w, n in expected.items()), args.timeout,
                       "every line to be counted")
            snapshot = app.snapshot("counts", os.path.join(data_dir, "snapshot"))
            print(f"snapshot of store 'counts': {len(snapshot.shards)} shards at changelog offsets "
                  f"{[s.changelog_offset for s in snapshot.shards]} in {snapshot.path}")
            return run_spark(snapshot.path, bootstrap, data_dir, expected, spark)
        finally:
            app.close(timeout=60)
    finally:
        backend.close()


def run_spark(snapshot_dir: str, bootstrap: str, data_dir: str, expected: collections.Counter, spark=None) -> int:
    from pyspark.sql import SparkSession

    from connectors.spark import register

    t0 = time.perf_counter()
    own = spark is None
    if own:
        spark = (SparkSession.builder.master("local[2]").appName("eddy-export-job")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
    try:
        register(spark)
        counts = spark.read.format("eddy_store").load(snapshot_dir)
        counts.createOrReplaceTempView("counts")
        (spark.read.format("eddy_changelog").option("bootstrap.servers", bootstrap)
         .option("topic", "wordcount-counts-changelog").option("key_serde", "STRING").option("value_serde", "INT64")
         .load().createOrReplaceTempView("changelog"))
        snapshot_counts = {r["key"]: r["value"] for r in counts.collect()}
        top = spark.sql(TOP_WORDS_SQL)
        out = os.path.join(data_dir, "top-words")
        top.write.mode("overwrite").parquet(out)
        rows = spark.read.parquet(out).orderBy("count", ascending=False).collect()
        print(f"top word per first letter (Parquet in {out}):")
        print(f"  {'letter':<6} {'word':<16} {'count':>7} {'updates':>8}")
        for r in rows:
            print(f"  {r['letter']:<6} {r['word']:<16} {r['count']:>7} {r['updates']:>8}")
        ok = snapshot_counts == dict(expected) and len(rows) == len({w[0] for w in expected})
        print(f"{'OK' if ok else 'MISMATCH'}: snapshot holds {len(snapshot_counts)} words "
              f"(expected {len(expected)}); Spark part took {time.perf_counter() - t0:.1f}s")
        return 0 if ok else 1
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
