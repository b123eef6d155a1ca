"""Spark export: PySpark 4 data sources for store snapshots and changelogs, and an export CLI.

    from connectors.spark import register
    register(spark)                      # eddy_store, eddy_changelog
    spark.read.format("eddy_store").load(app.snapshot("counts").path)

`python -m connectors.spark export ...` writes Parquet, CSV or Delta through Spark when it is
installed, otherwise through pyarrow alone (the same Arrow core, `connectors.spark.arrow_core`).
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the `eddy_store` and `eddy_changelog` data sources with a SparkSession."""
    from connectors.spark.changelog import EddyChangelogDataSource
    from connectors.spark.sources import EddyStoreDataSource

    spark.dataSource.register(EddyStoreDataSource)
    spark.dataSource.register(EddyChangelogDataSource)


__all__ = ["register"]
