"""One word count app instance in its own process, driven by tests/integration/test_apps_on_kafka.py
and the fault campaign (tests/faults/campaign.py).

    python wordcount_instance.py --bootstrap-servers HOST:PORT --application-id ID \
        --input TOPIC --output TOPIC --state-dir DIR --status-file FILE [--dump-file FILE] \
        [--config JSON]
    python wordcount_instance.py --topology dsl --bootstrap-servers HOST:PORT --application-id ID \
        --state-dir DIR --status-file FILE [--config JSON]

`--topology dsl` runs dsl_app.py's topology (its own topics) instead of word count.

The instance runs until SIGTERM or SIGINT, then closes cleanly (commit, checkpoint, leave the
group). While it runs it rewrites `--status-file` (atomically, JSON) with its app state, its
active tasks and how many records its threads processed, so the test can wait on conditions
instead of sleeping. With `--dump-file`, the contents of its local "counts" store are written
there just before it closes. SIGKILL is the crash: nothing is committed or checkpointed.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

if __name__ == "__main__":  # run as a script: make the repository importable
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

from streams import App, AppState, StreamsBuilder, serdes  # noqa: E402
from streams.topology import Topology  # noqa: E402

STORE = "counts"
log = logging.getLogger("wordcount_instance")
_STATUS_INTERVAL_S = 0.05


def build_topology(input_topic: str, output_topic: str) -> Topology:
    """Word count: lines -> words -> count per word (store "counts") -> output topic."""
    builder = StreamsBuilder()
    (builder.stream(input_topic, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .flat_map_values(str.split)
        .group_by(lambda key, word: word, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .count(store=STORE)
        .to_stream()
        .to(output_topic, key_serde=serdes.STRING, value_serde=serdes.INT64))
    return builder.build()


def _write_json(path: str, payload: Any) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f)
    os.replace(tmp, path)


def _status(app: App, closed: bool) -> dict:
    tasks = app.local_tasks() if not closed else {"active": [], "standby": []}
    return {
        "pid": os.getpid(),
        "state": app.state.value,
        "closed": closed,
        "active": sorted(str(t) for t in tasks["active"]),
        "processed": sum(t.processed_total for t in app.threads),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one word count instance")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--application-id", required=True)
    parser.add_argument("--topology", choices=("wordcount", "dsl"), default="wordcount")
    parser.add_argument("--input", help="word count's input topic")
    parser.add_argument("--output", help="word count's output topic")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--status-file", required=True)
    parser.add_argument("--dump-file", default=None)
    parser.add_argument("--config", default="{}", help="extra App config, as a JSON object")
    args = parser.parse_args(argv)
    if args.topology == "wordcount" and not (args.input and args.output):
        parser.error("word count needs --input and --output")
    if args.topology == "dsl" and args.dump_file:
        parser.error("--dump-file dumps word count's store only")
    logging.basicConfig(level=os.environ.get("WORDCOUNT_INSTANCE_LOG_LEVEL", "WARNING"), stream=sys.stderr,
                        format=f"%(asctime)s [{os.getpid()}] %(levelname)s %(name)s: %(message)s")

    config = {
        "application.id": args.application_id,
        "bootstrap.servers": args.bootstrap_servers,
        "state.dir": args.state_dir,
        **json.loads(args.config),
    }
    # A test that sees the instance hang on close sends SIGUSR1 first: every thread's stack
    # goes to stderr (the instance log) before the kill.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    if args.topology == "dsl":
        from dsl_app import build_topology as build_dsl_topology

        topology = build_dsl_topology()
    else:
        topology = build_topology(args.input, args.output)
    app = App(topology, config)
    app.start()
    while not stop.wait(_STATUS_INTERVAL_S):
        _write_json(args.status_file, _status(app, closed=False))
        if app.state in (AppState.ERROR, AppState.NOT_RUNNING):
            break
    if args.dump_file and app.state.is_running_or_rebalancing():
        _write_json(args.dump_file, dict(app.store(STORE).all()))
    log.info("closing")
    started = time.monotonic()
    closed = app.close(timeout=60)
    log.info("closed=%s in %.1fs, state %s", closed, time.monotonic() - started, app.state.value)
    if not closed:  # what the threads still running are stuck in, for the test's failure message
        faulthandler.dump_traceback(all_threads=True)
    _write_json(args.status_file, _status(app, closed=True))
    return 0 if closed and app.state is AppState.NOT_RUNNING else 1


if __name__ == "__main__":
    sys.exit(main())
