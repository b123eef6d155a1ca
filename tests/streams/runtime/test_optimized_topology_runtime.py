"""topology.optimization on the runtime: with merge.repartition.topics two groupings below one key
change read one repartition topic (the other is never created); with single.store.self.join a
stream joined with itself keeps one window store and its changelog. Results are the plain
topology's."""

from __future__ import annotations

from collections import Counter

from streams import App, AppState, JoinWindows, StreamsBuilder, serdes

from _runtime_util import Cluster, shutdown_on_error, unique, wait_for

S, I64 = serdes.STRING, serdes.INT64


def _topology(words: str, optimize: bool):
    """Words keyed by their first letter: how many start with each letter, and the longest."""
    b = StreamsBuilder()
    by_letter = b.stream(words, key_serde=S, value_serde=S).select_key(lambda k, v: v[0]).filter(
        lambda k, v: v != "-")
    by_letter.group_by_key(key_serde=S).count(store="letter-counts")
    by_letter.group_by_key(key_serde=S).reduce(lambda a, v: v if len(v) > len(a) else a, store="longest")
    return b.build({"topology.optimization": "all"} if optimize else None)


def test_two_groupings_below_one_key_change_run_through_one_repartition_topic(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    words = unique("words")
    cluster.create_topics(2, words)
    app_id = unique("merged")
    config = {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / "state"),
              "commit.interval.ms": 100, "topology.optimization": "all"}
    vocabulary = ["apple", "avocado", "banana", "blueberry", "cherry", "-", "apricots", "coconut", "bean"]
    sent = [vocabulary[i % len(vocabulary)] for i in range(90)]
    counts = Counter(w[0] for w in sent if w != "-")
    longest = {letter: max((w for w in vocabulary if w[0] == letter and w != "-"), key=len) for letter in counts}
    try:
        cluster.produce(words, [(str(i).encode(), w.encode()) for i, w in enumerate(sent)])
        app = App(_topology(words, optimize=True), config)
        shutdown_on_error(app)
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)

            def done() -> bool:
                c, lg = app.store("letter-counts"), app.store("longest")
                return all(c.get(k) == n and lg.get(k) == longest[k] for k, n in counts.items())

            wait_for(done, 60, "the counts and longest words")
        finally:
            assert app.close(timeout=60)
        topics = set(cluster.admin.list_topics(timeout=10).topics)
        assert f"{app_id}-letter-counts-repartition" in topics
        assert f"{app_id}-longest-repartition" not in topics
    finally:
        cluster.close()


def test_a_self_join_runs_over_one_window_store_and_changelog(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    events, out = unique("events"), unique("pairs")
    cluster.create_topics(2, events, out)
    app_id = unique("self-join")
    config = {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / "state"),
              "commit.interval.ms": 100, "topology.optimization": "all"}
    b = StreamsBuilder()
    s = b.stream(events, key_serde=S, value_serde=S)
    s.join(s, lambda a, c: f"{a}+{c}", JoinWindows.of_time_difference_with_no_grace(1000)).to(
        out, key_serde=S, value_serde=S)
    topology = b.build(config)
    # per key, records 10 ms apart: every pair (both orders, each with itself) is in the window
    sent = {f"k{k}": [f"v{k}-{i}" for i in range(3)] for k in range(4)}
    records = [(key.encode(), v.encode(), 1_000 + 10 * i) for key, vs in sent.items() for i, v in enumerate(vs)]
    expected = sorted((key, f"{a}+{c}") for key, vs in sent.items() for a in vs for c in vs)
    try:
        cluster.produce(events, [(k, v) for k, v, _ in records], timestamps=[ts for _, _, ts in records])
        app = App(topology, config)
        shutdown_on_error(app)
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            got = cluster.read_all(out, 2, until=lambda msgs: len(msgs) >= len(expected))
        finally:
            assert app.close(timeout=60)
        assert sorted((m.key().decode(), m.value().decode()) for m in got) == expected
        changelogs = {t for t in cluster.admin.list_topics(timeout=10).topics
                      if t.startswith(app_id) and t.endswith("-changelog")}
        assert changelogs == {f"{app_id}-KSTREAM-JOINTHIS-0000000003-store-changelog"}
    finally:
        cluster.close()
