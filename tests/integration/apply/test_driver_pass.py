"""A Parquet apply pass done on the driver: the Spark path's outcome, file for file, or
the Spark path itself (nothing of the driver's attempt left behind)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from changeflow.apply import buckets_np, driver_pass
from changeflow.apply.engine import apply_once, target_catalog
from changeflow.apply.errorq import entries
from changeflow.apply.target import BUCKET, bucket_expr
from changeflow.config import load_config
from changeflow.sites import open_pipeline

from .conftest import BASE, row, taken, vals

pytestmark = pytest.mark.spark

T = dt.datetime(2024, 3, 4, 5, 6, 7, 891011, tzinfo=dt.UTC)
APPLY = """
applies:
  - name: a
    queue: strmadmin.apply_q@site2
    buckets: 4
    conflicts:
      handlers: [{table: hr.dept, columns: [title], method: OVERWRITE}]
    errors: {stop_on_error: STOP}
"""


def _cfg(root: Path, *, stop: bool = False) -> Any:
    root.mkdir()
    (root / "pipeline.yaml").write_text(BASE + APPLY.replace("STOP", str(stop).lower()))
    cfg = load_config(root / "pipeline.yaml")
    open_pipeline(cfg)
    return cfg


def emp(i: int, v: int, **over: Any) -> dict[str, Any]:
    """Every column of an HR.EMP row: every logical type."""
    cols: dict[str, Any] = {
        "id": i, "name": f"n{i}-{v}", "sal": (Decimal(f"{i}.{v:02d}"), "NUMBER"),
        "born": dt.date(1980, 1, 1) + dt.timedelta(days=i + v),
        "seen": T + dt.timedelta(hours=v), "local": (dt.datetime(2024, 1, 1) + dt.timedelta(
            minutes=i + v), "TIMESTAMP"), "raw": (bytes([i % 256, v % 256]), "RAW"),
        "flag": (i + v) % 2 == 0, "score": (i / 7 + v, "BINARY_DOUBLE")}
    cols.update(over)
    return vals(**cols)


def dept(code: str, v: int) -> dict[str, Any]:
    return vals(code=code, title=f"{code}-{v}", size=v)


def _passes() -> list[list[dict[str, Any]]]:
    """Batches, one per apply run: the pass each should take is in the comments."""
    ins = [row("INSERT", new=emp(i, 0), txn=f"i{i}", scn=10 + i, pos=1) for i in range(1, 41)]
    ins += [row("INSERT", new=dept(f"D{i}", 0), table="HR.DEPT", key=("CODE",), txn=f"i{i}",
                scn=10 + i, pos=2) for i in range(1, 11)]
    plain = [  # the driver's: UPDATE, DELETE, INSERT, several effects per key, two tables
        row("UPDATE", old=vals(id=1, name="n1-0"), new=emp(1, 1), txn="p1", scn=100, pos=1),
        row("UPDATE", old=vals(id=1, name="n1-1"), new=emp(1, 2), txn="p1", scn=100, pos=2),
        row("DELETE", old=vals(id=2, name="n2-0"), txn="p2", scn=101, pos=1),
        row("INSERT", new=emp(2, 5), txn="p3", scn=102, pos=1),
        row("INSERT", new=emp(100, 0), txn="p3", scn=102, pos=2),
        row("UPDATE", old=vals(id=100, name="n100-0"), new=emp(100, 1), txn="p4", scn=103),
        row("DELETE", old=vals(id=100), txn="p5", scn=104),
        row("UPDATE", old=vals(id=3), new=emp(3, 9, name=None), txn="p6", scn=105),
        row("UPDATE", old=vals(code="D1", title="D1-0"), new=dept("D1", 7), table="HR.DEPT",
            key=("CODE",), txn="p6", scn=105, pos=2),
        row("DELETE", old=vals(code="D2"), table="HR.DEPT", key=("CODE",), txn="p7", scn=106),
        *[row("UPDATE", old=vals(id=i, name=f"n{i}-0"), new=emp(i, 3), txn=f"q{i}",
              scn=200 + i) for i in range(10, 40)],
    ]
    conflict = [  # conflicts, settled on the driver as in Spark:
        # p8 finds another name than it expects: it fails whole, its hr.dept row too
        row("UPDATE", old=vals(id=5, name="not-this"), new=emp(5, 4), txn="p8", scn=300),
        row("UPDATE", old=vals(code="D3", title="D3-0"), new=dept("D3", 8), table="HR.DEPT",
            key=("CODE",), txn="p8", scn=300, pos=2),
        row("UPDATE", old=vals(id=6, name="n6-0"), new=emp(6, 4), txn="p9", scn=301),
        # OVERWRITE resolves an update conflict on hr.dept's title
        row("UPDATE", old=vals(code="D4", title="not-this"), new=dept("D4", 9),
            table="HR.DEPT", key=("CODE",), txn="p13", scn=302),
        # an INSERT of an existing key and a DELETE of a missing one: no handler, they fail
        row("INSERT", new=emp(7, 7), txn="p14", scn=303),
        row("DELETE", old=vals(id=999), txn="p15", scn=304),
        # superseded: key 11's image comes from a later commit of the same source
        row("UPDATE", old=vals(id=11, name="n11-0"), new=emp(11, 8), txn="late", scn=150),
        # a key that p8 (failed) touched first, then p16: p16 finds what p8 did not do
        row("UPDATE", old=vals(id=5, name="n5-0"), new=emp(5, 6), txn="p16", scn=305),
    ]
    replay = [  # the driver's: q10..q12 were applied (skipped), p10 is new
        *plain[10:13],
        row("UPDATE", old=vals(id=7, name="n7-0"), new=emp(7, 5), txn="p10", scn=400),
    ]
    partial = [  # the driver's: UPDATEs without every column write partial images, and
        # an INSERT brings a new column (the table evolves; older rows read NULL)
        row("INSERT", new=emp(200, 0, extra="new column"), txn="p11", scn=500, pos=3),
        row("UPDATE", old=vals(id=8), new=vals(id=8, name="only-the-name"), txn="p11",
            scn=500),
        row("UPDATE", old=vals(id=20), new=vals(id=20, name="name-only"), txn="p11",
            scn=500, pos=2),
    ]
    after_partial = [  # the Spark path's: the touched bucket holds a partial image
        row("UPDATE", old=vals(id=8, name="only-the-name"), new=emp(8, 6), txn="p12",
            scn=600),
    ]
    return [ins, plain, conflict, replay, partial, after_partial]


def _raw(spark: Any, cfg: Any, table: str) -> list[tuple[Any, ...]]:
    """Every image of the table's files, with its bucket (file names aside)."""
    catalog = target_catalog(cfg, cfg.applies[0])
    header = catalog.get(table)
    assert header is not None
    out = []
    for f in catalog.files(table):
        df = spark.read.schema(header.spark_schema()).parquet(f.path)
        out += [(f.kind, f.version, f.bucket, *r) for r in df.collect()]
    return sorted(out, key=lambda r: tuple((v is None, repr(v)) for v in r))


def _run(spark: Any, cfg: Any, enqueue: Any) -> dict[str, Any]:
    from changeflow.apply.engine import target_catalog as tc
    from changeflow.apply.target import read_table

    results = []
    for batch in _passes():
        enqueue(cfg, batch)
        r = apply_once(spark, cfg, "a")
        results.append((r.transactions, r.changes, r.tables, r.skipped, r.errors,
                        r.conflicts_resolved, r.superseded))
    catalog = tc(cfg, cfg.applies[0])
    rows = {t: sorted(tuple(x) for x in read_table(spark, catalog, t).collect())
            for t in ("hr.emp", "hr.dept")}
    raw = {t: _raw(spark, cfg, t) for t in ("hr.emp", "hr.dept")}
    errors = [(e.transaction_id, e.error_kind) for e in entries(catalog.store, "a")]
    return {"results": results, "rows": rows, "raw": raw, "errors": errors,
            "counts": {t: catalog.row_count(t) for t in ("hr.emp", "hr.dept")}}


def test_a_pass_on_the_driver_is_the_spark_pass(spark, enqueue, tmp_path,  # type: ignore[no-untyped-def]
                                                monkeypatch) -> None:
    took = taken(monkeypatch, driver_pass, "run")
    fast = _run(spark, _cfg(tmp_path / "fast"), enqueue)
    # partial images in the touched files are the Spark path's
    assert took == [True, True, True, True, True, False]
    monkeypatch.setattr(driver_pass, "ENABLED", False)
    took.clear()
    slow = _run(spark, _cfg(tmp_path / "slow"), enqueue)
    assert took == [False] * 6
    assert fast["results"] == slow["results"]
    assert fast["errors"] == slow["errors"]
    assert sorted(fast["errors"]) == [("p14", "conflict"), ("p15", "conflict"),
                                      ("p8", "conflict")]
    assert fast["counts"] == slow["counts"]
    assert fast["rows"] == slow["rows"]
    assert fast["raw"] == slow["raw"]  # the same images in the same buckets and files
    emp_rows = {r[0]: r for r in fast["rows"]["hr.emp"]}
    assert 100 not in emp_rows and emp_rows[2][1] == "n2-5" and emp_rows[1][1] == "n1-2"
    assert emp_rows[3][1] is None and emp_rows[8][1] == "n8-6"
    assert emp_rows[20][1] == "name-only"
    assert emp_rows[20][2] == Decimal("20.03")  # the partial image kept the other columns
    assert emp_rows[200][-1] == "new column" and emp_rows[20][-1] is None
    assert emp_rows[5][1] == "n5-6" and emp_rows[6][1] == "n6-4" and emp_rows[11][1] == "n11-3"
    dept_rows = {r[0]: r for r in fast["rows"]["hr.dept"]}
    assert dept_rows["D3"][1] == "D3-0" and dept_rows["D4"][1] == "D4-9"
    assert fast["results"][2][4] == 3
    assert fast["results"][3] == (1, 1, {"hr.emp": 1}, 3, 0, 0, 0)  # three replays skipped
    assert fast["results"][0] == (40, 50, {"hr.emp": 40, "hr.dept": 10}, 0, 0, 0, 0)
    assert fast["results"][2][5:] == (1, 1)  # one conflict resolved, one change superseded


@pytest.mark.parametrize("lost", ["tombstones", "every row"])
def test_the_quality_check_sees_what_the_driver_wrote(spark, enqueue, tmp_path,  # type: ignore[no-untyped-def]
                                                      monkeypatch, lost: str) -> None:
    """A driver pass whose files lose rows fails the target check; nothing is committed."""
    from changeflow.apply import delta_arrow
    from changeflow.quality.policy import QualityError

    cfg = _cfg(tmp_path / "q")
    enqueue(cfg, _passes()[0])
    apply_once(spark, cfg, "a")
    real = delta_arrow.write_arrow

    def lossy(table: Any, data: pa.Table, *args: Any) -> Any:
        import pyarrow.compute as pc

        if lost == "every row":  # hr.dept's D2 is not deleted
            return real(table, data.slice(0, 0), *args)
        # no tombstones: key 100 (inserted, then deleted) stays
        return real(table, data.filter(pc.invert(data.column("_cf_deleted"))), *args)

    monkeypatch.setattr(delta_arrow, "write_arrow", lossy)
    took = taken(monkeypatch, driver_pass, "run")
    enqueue(cfg, _passes()[1])
    with pytest.raises(QualityError, match="target_rows_as_applied") as info:
        apply_once(spark, cfg, "a")
    catalog = target_catalog(cfg, cfg.applies[0])
    assert all(f.version == 1 for f in catalog.files("hr.emp"))  # nothing committed
    assert all(f.version == 1 for f in catalog.files("hr.dept"))
    quarantined = info.value.report.quarantine_path
    if lost == "every row":
        assert quarantined is None  # no file to move
    else:
        assert quarantined and "/_quarantine/" in quarantined
        assert not list((tmp_path / "q" / "s2" / "targets" / "hr.emp").glob("delta-v2-*"))
    assert not took  # the check's failure is the pass's outcome, not a reason to retry


def test_spark_buckets_from_numpy(spark) -> None:  # type: ignore[no-untyped-def]
    keys = pa.table({
        "a": pa.array([0, 1, -1, 2**62, -(2**63), None, 123456789], pa.int64()),
        "b": pa.array([1, None, -4, 5, 6, 7, -(2**31)], pa.int32()),
        "d": pa.array([dt.date(2020, 1, 1), dt.date(1500, 3, 1), None, dt.date(1970, 1, 1),
                       dt.date(2100, 1, 1), dt.date(1, 1, 1), dt.date(2000, 2, 29)]),
        "ts": pa.array([T] * 6 + [None], pa.timestamp("us", tz="UTC")),
        "flag": pa.array([True, False, None, True, False, True, False])})
    df = spark.createDataFrame(keys)
    for cols in (["a"], ["b"], ["d"], ["ts"], ["flag"], ["a", "b"], ["d", "a", "ts"]):
        want = df.select(bucket_expr(cols, 7).alias(BUCKET)).toArrow().column(BUCKET)
        assert buckets_np.buckets(keys, cols, 7).tolist() == want.to_pylist(), cols
    assert buckets_np.buckets(pa.table({"s": ["x"]}), ["s"], 4) is None  # Spark's, then


def test_rule_counts_are_noted_for_a_driver_pass(spark, enqueue, tmp_path,  # type: ignore[no-untyped-def]
                                                 monkeypatch) -> None:
    from changeflow.clients import rule_filter
    from changeflow.obs import logs, rulestats

    root = tmp_path / "r"
    root.mkdir()
    (root / "rules.yaml").write_text("""
rules:
  EMP: {condition: ":dml.get_object_name() = 'EMP'", rule_type: TABLE}
  DEPT: {condition: ":dml.get_object_name() = 'DEPT'", rule_type: TABLE}
rule_sets:
  ONLY_EMP: {rules: [EMP]}
  NO_DEPT: {rules: [DEPT]}
clients:
  a: {type: apply, queue: strmadmin.apply_q, positive_rule_set: ONLY_EMP,
      negative_rule_set: NO_DEPT}
""")
    (root / "pipeline.yaml").write_text("version: 1\nrules: rules.yaml\n" + BASE.replace(
        "version: 1\n", "") + APPLY.replace("STOP", "false"))
    cfg = load_config(root / "pipeline.yaml")
    open_pipeline(cfg)
    took = taken(monkeypatch, driver_pass, "run")
    enqueue(cfg, _passes()[0])
    apply_once(spark, cfg, "a", rule_filter=rule_filter(cfg, "apply", "a"))
    enqueue(cfg, _passes()[1])
    with logs.context(run_id="r-1"):
        res = apply_once(spark, cfg, "a", rule_filter=rule_filter(cfg, "apply", "a"))
    assert took == [True, True]
    assert res.tables == {"hr.emp": 38} and "hr.dept" not in res.tables
    got = {(c["rule_set"], c["rule"]): (c["matched"], c["evaluated"])
           for c in rulestats.collect("apply", "a", "r-1") or []}
    assert got == {("ONLY_EMP", "EMP"): (38, 40), ("NO_DEPT", "DEPT"): (2, 40)}


def test_a_new_tables_columns_come_in_the_inserts_order(spark, enqueue, tmp_path,  # type: ignore[no-untyped-def]
                                                        monkeypatch) -> None:
    cfg = _cfg(tmp_path / "o")
    took = taken(monkeypatch, driver_pass, "run")
    enqueue(cfg, [
        row("UPDATE", old=vals(id=1), new=vals(id=1, score=(2.5, "BINARY_DOUBLE"), name="b"),
            txn="u", scn=20),  # lists fewer columns, in another order
        row("INSERT", new=emp(1, 0), txn="i", scn=10)])
    res = apply_once(spark, cfg, "a")
    assert took == [True] and res.tables == {"hr.emp": 2}
    header = target_catalog(cfg, cfg.applies[0]).get("hr.emp")
    assert header is not None
    assert header.column_names == ["id", "name", "sal", "born", "seen", "local", "raw", "flag",
                                   "score"]


def test_stop_on_error_on_the_driver_is_the_spark_pass(spark, enqueue, tmp_path,  # type: ignore[no-untyped-def]
                                                      monkeypatch) -> None:
    from changeflow.apply.engine import ApplyStoppedError
    from changeflow.apply.target import read_table

    def scenario(root: Path) -> Any:
        cfg = _cfg(root, stop=True)
        for batch in _passes()[:2]:
            enqueue(cfg, batch)
            apply_once(spark, cfg, "a")
        enqueue(cfg, _passes()[2])
        with pytest.raises(ApplyStoppedError, match="p8"):
            apply_once(spark, cfg, "a")
        catalog = target_catalog(cfg, cfg.applies[0])
        return ({t: sorted(tuple(x) for x in read_table(spark, catalog, t).collect())
                 for t in ("hr.emp", "hr.dept")},
                {t: _raw(spark, cfg, t) for t in ("hr.emp", "hr.dept")},
                [(e.transaction_id, e.error_kind) for e in entries(catalog.store, "a")])

    took = taken(monkeypatch, driver_pass, "run")
    fast = scenario(tmp_path / "fast")
    assert took[-1] is True  # the stopping pass ran on the driver
    monkeypatch.setattr(driver_pass, "ENABLED", False)
    slow = scenario(tmp_path / "slow")
    assert fast == slow
    # the pass's failures are in the error queue; what came after p8 waits for the next run
    assert sorted(fast[2]) == [("p14", "conflict"), ("p15", "conflict"), ("p8", "conflict")]
    emp_rows = {r[0]: r for r in fast[0]["hr.emp"]}
    assert emp_rows[6][1] == "n6-0"  # p9 (after p8) not applied


def test_an_update_that_moves_its_key_takes_the_spark_pass(spark, enqueue, tmp_path,  # type: ignore[no-untyped-def]
                                                          monkeypatch) -> None:
    cfg = _cfg(tmp_path / "m")
    took = taken(monkeypatch, driver_pass, "run")
    enqueue(cfg, _passes()[0])
    apply_once(spark, cfg, "a")
    enqueue(cfg, [row("UPDATE", old=vals(id=1, name="n1-0"), new=emp(500, 1), txn="m",
                      scn=100)])
    res = apply_once(spark, cfg, "a")
    assert took == [True, False] and res.tables == {"hr.emp": 2}  # a tombstone, an image
    ids = {r[0] for r in target_rows(spark, cfg)}
    assert 500 in ids and 1 not in ids


def target_rows(spark: Any, cfg: Any) -> list[Any]:
    from changeflow.apply.target import read_table

    return read_table(spark, target_catalog(cfg, cfg.applies[0]), "hr.emp").collect()
