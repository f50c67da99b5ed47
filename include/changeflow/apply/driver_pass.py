"""A Parquet apply pass done on the driver with Arrow, for the common case.

A pass's Spark path (:class:`changeflow.apply.passes.Pass`) starts about twenty Spark
jobs: each costs scheduling and code generation whatever its size, and a pass of
100,000 changes is small work for each of them. When Spark runs on this machine and the
pass is plain, the same pass is done here on the driver, with the same rules, the same
results and the same files:

* the batches are read with Arrow (:func:`changeflow.queues.arrow_io.conform_arrow`),
  and the apply's rule sets decided per distinct message (they must be *simple*, see
  :mod:`changeflow.rules.arrow_filter`; per-rule counts are noted in recorded runs);
* the source transactions are surveyed and the done ones left out (:mod:`.positions`);
* per target table, the LCRs become effects (:mod:`.images`: the key, the data columns
  typed as the table declares them, the old values of the compared columns), the
  current rows of the changed keys are read from the touched buckets' files
  (:mod:`.lookup_arrow`), and conflict detection runs as :func:`.conflicts.detect`
  does, over the effects sorted by key and run order; keys in trouble (a conflict, a
  replay, a superseded change) are folded exactly by :func:`.conflicts.fold` with the
  conflict handlers, as in the Spark path, while failed transactions change what later
  ones find; ``stop_on_error`` cuts the pass at the first failure;
* the images are written one file per touched bucket (:func:`.delta_arrow.write_arrow`,
  buckets by Spark's own hash, :mod:`.buckets_np`), checked (the quality rollup of
  :mod:`changeflow.quality.target_arrow`), failed transactions' LCRs are written to
  the error queue's files, and the pass commits as every pass does.

Whatever is not plain is left to the Spark path, which then does the whole pass:
:func:`run` returns None, having written nothing that stays. That is the case for a
pass with DDL, user messages, command types outside INSERT/UPDATE/DELETE, an UPDATE that
moves its key, DML or precommit handlers, enqueue destinations, a re-execution, rule
sets that are not simple, a TRUNCATE or DROP, target files with partial images in the
touched buckets (before compaction), and files that are not local or not held as Spark
writes them. A pass of more than :data:`MAX_LCRS` LCRs is the Spark path's too.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from changeflow import fs, lcr
from changeflow.apply import arrow_effects as ae
from changeflow.apply import arrow_files as af
from changeflow.apply import buckets_np, delta_arrow, lookup_arrow, positions
from changeflow.apply.arrow_detect import firsts, settle, without
from changeflow.apply.ddl_parquet import DdlPlan
from changeflow.apply.images import ORDER
from changeflow.apply.positions import TxnId
from changeflow.apply.target import BUCKET, TargetTable, bucket_expr
from changeflow.errors import QueueDataError
from changeflow.quality.target import TargetWrite

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from changeflow.apply.passes import Pass
    from changeflow.apply.tables import TablePlan

log = logging.getLogger(__name__)

# Whether passes may be done here; tests turn it off to compare with the Spark path.
ENABLED = True
# The most LCRs a pass may hold to be done on the driver.
MAX_LCRS = 1_000_000

class NotHere(af.Unproven):
    """The pass is not plain enough for the driver: the Spark path does it."""


def run(p: Pass) -> bool | None:
    """Do the pass here. Returns whether its batches are done, or None: nothing was done
    (nothing written, nothing committed), the Spark path must do the pass."""
    import pyarrow as pa

    why = _unfit(p)
    if why is not None:
        log.info("apply %s: the pass runs in Spark (%s)", p.spec.name, why)
        return None
    d = _Driver(p)
    try:
        return d.run()
    except (NotHere, af.Unproven, pa.ArrowInvalid, pa.ArrowNotImplementedError,
            pa.ArrowTypeError) as exc:
        if d.committing:  # the commit's outcome is the pass's, whatever it is
            raise
        d.undo()
        log.info("apply %s: the pass runs in Spark (%s)", p.spec.name, exc)
        return None
    except BaseException:
        if not d.committing:
            d.undo()
        raise


def _unfit(p: Pass) -> str | None:
    """Why the pass cannot be done here, from what is known before reading anything."""
    if not ENABLED:
        return "the driver pass is off"
    if p.source is not None or p.reexec is not None or not p.batches:
        return "a re-execution"
    if p.dests:
        return "enqueue destinations"
    if not af.spark_is_local(p.spark):
        return "Spark does not run on this machine"
    if p.handlers.precommit is not None:
        return "a precommit handler"
    if p.rule_filter is not None and getattr(p.rule_filter, "rule_sets", None) is None:
        return "rule sets that transform messages"
    if any(af.local_path(b.path or "") is None for b in p.batches):
        return "batches not on the local file system"
    if sum(b.n_messages for b in p.batches) > MAX_LCRS:
        return f"more than {MAX_LCRS} LCRs"
    return None


class _Driver:
    """One pass's work on the driver (see the module docstring)."""

    def __init__(self, p: Pass):
        self.p = p
        self.written: list[str] = []  # delta directories to remove if the pass gives up
        self.committing = False  # from here on, the files are the commit's

    def undo(self) -> None:
        """Forget what the pass noted and remove what it wrote."""
        p = self.p
        p.failed.clear()
        p.plans.clear()
        p.info, p.times = {}, {}
        p.timings.clear()
        for root in self.written:
            shutil.rmtree(root, ignore_errors=True)

    def run(self) -> bool:
        import pyarrow.compute as pc

        from changeflow.quality.validator import warm_up

        p = self.p
        if p.cfg.quality.enabled:
            warm_up()
        with p.step("survey"):
            table = self._read()
            txns = ae.transactions(table)
            with p.rt.store.read() as conn:
                done = positions.done(conn, p.spec.name, [t.id for t in txns])
        todo = [t for t in txns if t.id not in done]
        if done:
            table = table.filter(pc.invert(ae.of_txns(table, done)))
        p.times = {t.id: t.commit_time for t in todo}
        p.info = {t.id: t for t in todo}
        ddl = DdlPlan(p.catalog, p.spec, p.handlers)
        with p.step("conflicts"):
            work = self._tables(table, ddl)
        excluded = set(p.failed) | p._cut
        with p.step("write"):
            written = self._write(work, excluded)
        with p.step("quality"):
            p._check(written)
        with p.step("error queue and enqueue"):
            files = self._error_files(table)
        applied = [t for t in todo if t.id not in excluded]
        self.committing = True
        with p.step("commit"):
            p._commit(written, ddl, applied, files, not p._cut)
        p.result.skipped += len(txns) - len(todo)
        p._tally(written, applied, 0, ddl)
        return not p._cut

    def _error_files(self, table: pa.Table) -> dict[str, tuple[str, int]]:
        """Every failed transaction's LCRs (as received) in the error queue's files."""
        out: dict[str, tuple[str, int]] = {}
        for t in self.p.failed:
            part = table.filter(ae.of_txns(table, {t})).select(list(lcr.FIELD_NAMES))
            out[t.key] = self.p._error_file(part.sort_by([("position", "ascending")]))
        return out

    # -- reading -------------------------------------------------------------------------
    def _read(self) -> pa.Table:
        """The batches' messages the rule sets keep; all of them plain row LCRs."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from changeflow.queues import io as qio
        from changeflow.rules.arrow_filter import filter_for_client

        p = self.p
        files = qio._check_with_arrow(p.batches)  # noqa: SLF001  (the contract's checks)
        if files is None:
            raise NotHere("the batches are not on a file system Arrow reads")
        parts = _read_files(files)
        table = pa.concat_tables(parts) if parts else lcr.arrow_schema().empty_table()
        if p.rule_filter is not None:
            kept = filter_for_client(p.rule_filter, table)
            if kept is None:
                raise NotHere("rule sets that are not simple")
            table = kept
        if any(table.column(c).null_count for c in ("object_owner", "object_name")):
            raise NotHere("a row LCR without its table's owner or name")
        kinds = pc.unique(table.column("kind")).to_pylist()
        if any(k != "ROW" for k in kinds):
            raise NotHere("messages other than row LCRs")
        cmds = pc.unique(table.column("command_type")).to_pylist()
        if any(c not in ("INSERT", "UPDATE", "DELETE") for c in cmds):
            raise NotHere("a command type other than INSERT, UPDATE or DELETE")
        handled = p.handlers.dml_tables()
        if handled and set(pc.unique(ae.table_names(table)).to_pylist()) & handled:
            raise NotHere("DML handlers")
        return table

    # -- tables --------------------------------------------------------------------------
    def _tables(self, table: pa.Table, ddl: DdlPlan) -> list[_Work]:
        from changeflow.apply.conflicts import effective_handlers

        p = self.p
        shapes = ae.shapes(table)
        handlers = effective_handlers(p.rt.store, p.spec.name, p.spec.conflicts.handlers)
        plans = []
        for name, shape in shapes.items():
            # a new table or new columns: the header the commit records (old files lack
            # the new columns: reads give NULLs)
            plan = p._plan(name, shape, ddl, [h for h in handlers if h.table == name])
            if p.failed or plan is None:
                raise NotHere(f"table {name} cannot take the pass's LCRs as they are")
            if plan.cutoff is not None:
                raise NotHere(f"table {name} was truncated or dropped")
            p.plans[name] = plan
            plans.append(plan)
        names = ae.table_names(table)
        with ThreadPoolExecutor(max_workers=min(4, max(1, len(plans)))) as pool:
            works = list(pool.map(lambda plan: self._table(plan, table, names), plans))
        self._settle(works)
        return works

    def _settle(self, works: list[_Work]) -> None:
        """Settle conflicts as :meth:`.passes.Pass._tables` does: while transactions
        fail, what later ones find changes, so the tables they touch are looked at
        again; then ``stop_on_error`` cuts the pass at the first failure."""
        p = self.p
        order = sorted(p.info)
        todo = list(works)
        for _ in range(len(order) + 1):
            before = set(p.failed)
            for w in todo:
                w.fast, w.folded, failed = settle(w.effects, w.current, w.plan,
                                                  set(p.failed), p.times)
                for f in failed.values():
                    p._fail(f)
            new = set(p.failed) - before
            if not new:
                break
            touched = set().union(*(p.info[t].tables for t in new if t in p.info),
                                  *(p.failed[t].tables for t in new))
            todo = [w for w in works if w.plan.table.name in touched]
        p._stop_at_first_error(order)

    def _table(self, plan: TablePlan, table: pa.Table, names: pa.ChunkedArray) -> _Work:
        import pyarrow.compute as pc

        mine = table.filter(pc.equal(names, plan.table.name))
        eff = ae.effects(mine, plan.table, plan.compare, partial=plan.partial)
        keys = ae.distinct_keys(eff, plan.table.key_columns)
        bucket = _buckets(self.p, keys, plan.table)
        current, before = None, None
        if plan.lookup_needed and not plan.is_new:
            before, current = self._lookup(plan, keys, bucket)
        return _Work(plan, eff, keys, current, before)

    def _lookup(self, plan: TablePlan, keys: pa.Table, bucket: np.ndarray
                ) -> tuple[pa.Table | None, pa.Table | None]:
        """The raw images of the changed keys and their current rows (None: no files)."""
        import numpy as np
        import pyarrow as pa

        t = plan.table
        touched = set(np.unique(bucket).tolist())
        files = [f for f in self.p.catalog.files(t.name) if f.bucket in touched]
        plan.old_files = files
        if not files:
            return None, None
        if any(f.kind == "pdelta" for f in files):
            raise NotHere(f"table {t.name} has partial images before compaction")
        needed = plan.compare + [h.resolution_column for h in plan.handlers
                                 if h.resolution_column and h.resolution_column
                                 not in plan.compare]
        paths = af.local_paths(self.p.spark, files)
        want = af.arrow_schema(lookup_arrow.schema_of(t, needed))
        if paths is None or want is None or not af.exact_keys(want, t.key_columns):
            raise NotHere(f"the files of {t.name} are not local or not exact")
        wanted = pa.table({k: keys.column(k).cast(want.field(k).type) for k in t.key_columns})
        rows = lookup_arrow.read_matching(paths, want, wanted, t.key_columns)
        return rows, lookup_arrow.current(rows, t.key_columns, needed)

    # -- writing -------------------------------------------------------------------------
    def _write(self, work: list[_Work], excluded: set[TxnId]) -> list[TargetWrite]:
        p = self.p
        tag = uuid.uuid4().hex[:12]
        apply_tag = bytes.fromhex(p.spec.apply_tag)

        def one(w: _Work) -> TargetWrite:
            t = w.plan.table
            kind = "pdelta" if w.plan.partial or w.plan.folded_partial else "delta"
            applied = w.applied(excluded)
            data = _images(applied, t, t.version + 1, apply_tag)
            data = data.append_column(BUCKET, _buckets(p, data, t))
            root = af.local_path(fs.join(t.root, f"{kind}-v{t.version + 1}-{tag}"))
            if root is not None:
                self.written.append(root)
            files = delta_arrow.write_arrow(t, data, kind, tag, p.spark.version)
            if files is None:
                raise NotHere(f"the delta of {t.name} cannot be written with Arrow")
            quality = p.cfg.quality.enabled
            return TargetWrite(t, files, None, None, p._rows_before(w.plan), data.num_rows,
                               before_arrow=w.before if quality else None,
                               expected_arrow=_expected(w, applied) if quality else None)

        with ThreadPoolExecutor(max_workers=min(4, max(1, len(work)))) as pool:
            return list(pool.map(one, work))


class _Work:
    """One table's part of the pass: its plan, effects, changed keys and current rows."""

    def __init__(self, plan: TablePlan, effects: pa.Table, keys: pa.Table,
                 current: pa.Table | None, before: pa.Table | None):
        self.plan, self.effects, self.keys = plan, effects, keys
        self.current, self.before = current, before
        self.fast: pa.Table = effects  # the effects that take the fast path
        self.folded: pa.Table | None = None  # the fold's, for keys in trouble

    def applied(self, excluded: set[TxnId]) -> pa.Table:
        """The effects to write: the fast path's and the fold's, without ``excluded``'s."""
        import pyarrow as pa

        parts = [self.fast] + ([self.folded] if self.folded is not None else [])
        return without(pa.concat_tables(parts), excluded)


# -- reading -----------------------------------------------------------------------------
def _read_files(files: list[str]) -> list[pa.Table]:
    """Batch files read as Spark reads them with the contract's schema."""
    import pyarrow.parquet as pq

    from changeflow.queues.arrow_io import _filesystem, conform_arrow

    def one(path: str) -> pa.Table:
        filesystem, inner = _filesystem(path)
        try:
            pf = pq.ParquetFile(inner, filesystem=filesystem)
            meta = pf.metadata.metadata or {}
            if any(k in meta for k in (b"org.apache.spark.legacyDateTime",
                                       b"org.apache.spark.legacyINT96")):
                raise NotHere(f"{path}: dates written in the legacy calendar")
            got = pf.read(use_threads=False)
        except OSError as exc:
            raise QueueDataError(f"cannot read Parquet at {path}: {exc}") from exc
        return conform_arrow(got, origin=path)

    workers = max(1, min(len(files), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, files))


def _buckets(p: Pass, rows: pa.Table, t: TargetTable) -> pa.Array:
    """Spark's bucket of each row's key (numpy, or a Spark job for other key types)."""
    import pyarrow as pa

    got = buckets_np.buckets(rows, t.key_columns, t.buckets)
    if got is not None:
        return pa.array(got, pa.int32())
    frame = p.spark.createDataFrame(rows.select(t.key_columns))
    out = frame.select(bucket_expr(t.key_columns, t.buckets).alias(BUCKET)).toArrow()
    return out.column(BUCKET).cast(pa.int32()).combine_chunks()


# -- images and the quality check's inputs -----------------------------------------------
def _images(eff: pa.Table, t: TargetTable, seq: int, tag: bytes) -> pa.Table:
    """:func:`.images.images` over Arrow, typed as Spark writes the table."""
    import pyarrow as pa
    import pyarrow.compute as pc

    want = af.arrow_schema(t.spark_schema())
    if want is None:
        raise NotHere(f"a column of {t.name} has no Arrow type")
    n = eff.num_rows
    kind = eff.column("_e_kind")
    cols = {c: eff.column(c) for c in t.column_names}
    cols.update({
        "_cf_seq": pa.array([seq] * n, pa.int64()), "_cf_scn": eff.column("_e_scn"),
        "_cf_pos": eff.column("_e_pos"), "_cf_deleted": pc.equal(kind, "D"),
        "_cf_src": eff.column("_e_src"), "_cf_tag": pa.array([tag] * n, pa.binary()),
        "_cf_absent": pc.if_else(pc.equal(kind, "U"), eff.column("_e_absent"),
                                 pa.nulls(n, eff.column("_e_absent").type)),
    })
    return pa.Table.from_arrays([pc.cast(cols[f.name], f.type) for f in want], schema=want)


def _expected(w: _Work, eff: pa.Table) -> pa.Table:
    """Per changed key: whether it existed and whether it should exist after the pass
    (``eff``: the effects it applies)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = w.plan.table.key_columns
    # Spark's window order: descending, NULLs last
    order = pc.sort_indices(eff, sort_keys=[*[(k, "ascending", "at_start") for k in keys],
                                            *[(c, "descending", "at_end") for c in ORDER]])
    ranked = eff.take(order).combine_chunks()
    last = ranked.filter(pa.array(firsts(ranked, keys)))
    present = pa.table({**{k: last.column(k) for k in keys},
                        "present": pc.not_equal(last.column("_e_kind"), "D")})
    every = w.keys
    if w.current is not None:
        every = every.join(w.current.select([*keys, "_c_exists"]), keys,
                           join_type="left outer", use_threads=False, coalesce_keys=True)
        before = pc.fill_null(every.column("_c_exists"), False)
    else:
        before = pa.array([False] * every.num_rows)
    every = pa.table({**{k: every.column(k) for k in keys}, "before": before})
    out = every.join(present, keys, join_type="left outer", use_threads=False,
                     coalesce_keys=True)
    return pa.table({**{k: out.column(k) for k in keys}, "before": out.column("before"),
                     "present": pc.coalesce(out.column("present"), out.column("before"))})


__all__ = ["ENABLED", "MAX_LCRS", "NotHere", "run"]
