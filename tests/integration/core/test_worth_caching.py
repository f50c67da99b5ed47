"""``changeflow.spark.worth_caching``: a frame read more than once is cached when computing
it again would run Python or give other values, and read again otherwise; an apply pass
also caches small batches (``changeflow.apply.survey.cache_batches``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from pyspark.sql import functions as F

from changeflow import lcr
from changeflow.apply.survey import REREAD_FROM, cache_batches
from changeflow.queues.model import Batch
from changeflow.rules.ruleset import Rule, RuleSet, RuleSetPair
from changeflow.spark import worth_caching

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.spark


@pytest.fixture
def parquet(spark, tmp_path: Path):  # type: ignore[no-untyped-def]
    path = str(tmp_path / "rows")
    spark.range(10).select("id", (F.col("id") % 3).alias("k")).write.parquet(path)
    return spark.read.parquet(path)


def test_a_read_with_filters_and_projections_is_read_again(parquet) -> None:  # type: ignore[no-untyped-def]
    df = parquet.where(F.col("k") == 1).select("id", F.upper(F.col("k").cast("string")))
    assert worth_caching(df) is False


def test_a_python_udf_is_cached(parquet) -> None:  # type: ignore[no-untyped-def]
    plus = F.udf(lambda x: x + 1, "long")
    assert worth_caching(parquet.select(plus("id").alias("n")).where(F.col("n") > 2)) is True


def test_a_python_function_over_arrow_batches_is_cached(parquet) -> None:  # type: ignore[no-untyped-def]
    df = parquet.mapInArrow(lambda batches: batches, parquet.schema).where(F.col("k") == 0)
    assert worth_caching(df) is True


def test_a_nondeterministic_column_is_cached(parquet) -> None:  # type: ignore[no-untyped-def]
    assert worth_caching(parquet.select("id", F.rand().alias("r"))) is True
    assert worth_caching(parquet.select("id", F.expr("uuid()").alias("u"))) is True


def test_the_partition_id_alone_does_not_count(parquet) -> None:  # type: ignore[no-untyped-def]
    """The rule filter's barrier to the optimizer: values that do not depend on it."""
    ok = (F.coalesce(F.lit(None).cast("int"), F.lit(-1) - F.spark_partition_id()) >= 0)
    assert worth_caching(parquet.select("*", ok.alias("ok")).where("ok")) is False
    assert worth_caching(parquet.select("*", (F.rand() + F.spark_partition_id()).alias("r"))) \
        is True


def test_a_rule_sets_filter_of_batches_is_read_again(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "batch")
    spark.createDataFrame([], lcr.spark_schema()).write.parquet(path)
    pair = RuleSetPair(positive=RuleSet("P", [Rule("X", ":dml.get_object_owner() = 'HR'")]),
                       negative=RuleSet("N", [Rule("Y", ":dml.get_object_name() = 'SECRET'")]))
    assert worth_caching(pair.filter(spark.read.schema(lcr.spark_schema()).parquet(path))) \
        is False


def _batches(*sizes: int) -> list[Batch]:
    return [Batch(i, "q", f"b{i}", f"/q/b{i}", n, 0, "test", None, None)
            for i, n in enumerate(sizes)]


def test_a_pass_reads_large_batches_again_and_caches_small_ones(parquet) -> None:  # type: ignore[no-untyped-def]
    assert cache_batches(_batches(100_000), parquet) is False
    assert cache_batches(_batches(REREAD_FROM, REREAD_FROM), parquet) is False
    assert cache_batches(_batches(*[100] * 200), parquet) is True  # a file read per 100 rows
    assert cache_batches(_batches(REREAD_FROM, REREAD_FROM - 2), parquet) is True
    assert cache_batches([], parquet) is True  # a re-execution's error-queue entries
    plus = F.udf(lambda x: x + 1, "long")
    assert cache_batches(_batches(100_000), parquet.select(plus("id"))) is True
