"""Read Iceberg tables with plain PySpark and Iceberg's Spark runtime, no changeflow import:
what any Spark user does with the targets an apply wrote.

Usage: python read_iceberg.py JARS_DIR STATE_DB WAREHOUSE CATALOG TABLE... (prints JSON)
"""

import decimal
import glob
import json
import sys

from pyspark.sql import SparkSession


def text(v: object) -> str:
    """A value as text, decimals without trailing zeros (their scale is the table's)."""
    return format(v.normalize(), "f") if isinstance(v, decimal.Decimal) else str(v)


def main() -> None:
    """Read the tables named on the command line and print them as JSON."""
    jars, db, warehouse, catalog, *tables = sys.argv[1:]
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.jars", ",".join(sorted(glob.glob(f"{jars}/*.jar"))))
             .config("spark.sql.extensions",
                     "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .config(f"spark.sql.catalog.{catalog}", "org.apache.iceberg.spark.SparkCatalog")
             .config(f"spark.sql.catalog.{catalog}.type", "jdbc")
             .config(f"spark.sql.catalog.{catalog}.uri", f"jdbc:sqlite:{db}")
             .config(f"spark.sql.catalog.{catalog}.jdbc.schema-version", "V1")
             .config(f"spark.sql.catalog.{catalog}.warehouse", warehouse)
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())

    out = {t: sorted([[text(v) for v in r] for r in spark.table(f"{catalog}.{t}")
                      .drop("_cf_src", "_cf_scn", "_cf_pos", "_cf_tag").collect()])
           for t in tables}
    print("ROWS " + json.dumps(out))
    spark.stop()


if __name__ == "__main__":
    main()
