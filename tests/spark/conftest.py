"""One local SparkSession for every test of the skew job (a JVM: ~5 s to start, ~0.7 GB)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # never look up the machine's name


@pytest.fixture(scope="session")
def spark() -> Iterator:
    """A local[2] SparkSession shared by the session's tests, stopped at the end."""
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("bluedove-tests")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
