"""App.close() releases the clients it made: the admin client, which has no close of its own, is
gone once the app is closed even while the caller keeps the App (as Kafka Streams closes its
admin client in close())."""

from __future__ import annotations

import gc
import weakref

from streams import App, AppState, StreamsBuilder, serdes

from _runtime_util import Cluster, unique

S = serdes.STRING


def test_a_closed_app_keeps_no_admin_client(backend_config, tmp_path):
    source, sink = unique("close-in"), unique("close-out")
    cluster = Cluster(backend_config)
    try:
        cluster.create_topics(1, source, sink)
        b = StreamsBuilder()
        b.stream(source, key_serde=S, value_serde=S).to(sink, key_serde=S, value_serde=S)
        app = App(b.build(), {**cluster.config, "application.id": unique("close"), "state.dir": str(tmp_path)})
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60), app.state
            cluster.produce(source, [(b"k", b"v")])
            cluster.read_all(sink, 1, until=lambda got: len(got) == 1)
            admin = weakref.ref(app._admin)
        finally:
            assert app.close(timeout=60)
        gc.collect()
        assert admin() is None, gc.get_referrers(admin())
        assert app.state is AppState.NOT_RUNNING  # the App itself is still held here
    finally:
        cluster.close()
