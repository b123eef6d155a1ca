"""Spark connector tests: one real local[2] SparkSession for the whole test session."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None:
        pytest.skip("pyspark needs a Java runtime")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("eddy-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    from connectors.spark import register

    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def running_app(tmp_path_factory):
    """A running App with a store of every serde and kind, after its first input is processed."""
    from _spark_apps import RunningApp, make_records

    app = RunningApp(str(tmp_path_factory.mktemp("sparkapp"))).start()
    try:
        app.produce(make_records(1500, seed=7))
        app.wait_processed()
        yield app
    finally:
        app.close()


@pytest.fixture(scope="session")
def snapshots(running_app, tmp_path_factory):
    """One snapshot of each store of `running_app`, taken with no input in flight, and the
    stores' expected contents."""
    from _spark_apps import STORES, expected_from

    base = tmp_path_factory.mktemp("snapshots")
    with running_app.lock:
        taken = {name: running_app.app.snapshot(name, str(base / name)) for name in STORES}
        expected = expected_from(running_app.sent)
    return taken, expected
