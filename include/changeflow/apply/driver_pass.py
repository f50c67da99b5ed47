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
from typing import TYPE_CHECKING, Any

from changeflow import fs, lcr
from changeflow.apply import arrow_files as af
from changeflow.apply import buckets_np, delta_arrow, lookup_arrow, positions, survey
from changeflow.apply.ddl_parquet import DdlPlan
from changeflow.apply.images import ORDER, lcr_key
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

_TXN = ("source_database_name", "commit_scn", "transaction_id")


class NotHere(Exception):  # noqa: N818  (not an error: a reason to take the Spark path)
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
        from changeflow.quality.validator import warm_up

        p = self.p
        if p.cfg.quality.enabled:
            warm_up()
        with p.step("survey"):
            table = self._read()
            txns = _transactions(table)
            with p.rt.store.read() as conn:
                done = positions.done(conn, p.spec.name, [t.id for t in txns])
        todo = [t for t in txns if t.id not in done]
        if done:
            table = table.filter(_not_done(table, done))
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
        import pyarrow.compute as pc

        out: dict[str, tuple[str, int]] = {}
        for t in self.p.failed:
            mask = pc.and_(pc.and_(pc.equal(table.column("source_database_name"), t.source),
                                   pc.equal(table.column("commit_scn"), t.scn)),
                           pc.equal(table.column("transaction_id"), t.txn))
            part = table.filter(pc.fill_null(mask, False)).select(list(lcr.FIELD_NAMES))
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
        if p.handlers.dml_tables():
            names = pc.utf8_lower(pc.binary_join_element_wise(
                table.column("object_owner"), table.column("object_name"), "."))
            if set(pc.unique(names).to_pylist()) & p.handlers.dml_tables():
                raise NotHere("DML handlers")
        return table

    # -- tables --------------------------------------------------------------------------
    def _tables(self, table: pa.Table, ddl: DdlPlan) -> list[_Work]:
        from changeflow.apply.conflicts import effective_handlers

        p = self.p
        shapes = _shapes(table)
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
        names = pc_names(table)
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
                for f in _settle(w, set(p.failed), p.times).values():
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
        eff = effects(mine, plan.table, plan.compare, partial=plan.partial)
        keys = _distinct_keys(eff, plan.table.key_columns)
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
        return _without(pa.concat_tables(parts), excluded)


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


def pc_names(table: pa.Table) -> pa.ChunkedArray:
    """Each message's target table name (``owner.name``, lower case)."""
    import pyarrow.compute as pc

    return pc.utf8_lower(pc.binary_join_element_wise(
        table.column("object_owner"), table.column("object_name"), "."))


def _transactions(table: pa.Table) -> list[survey.TxnInfo]:
    """:func:`.survey.transactions` of plain row LCRs."""
    import pyarrow as pa

    if table.num_rows == 0:
        return []
    t = pa.table({**{c: table.column(c) for c in _TXN}, "t": table.column("commit_time"),
                  "name": pc_names(table), "one": pa.array([1] * table.num_rows, pa.int64())})
    g = t.group_by(list(_TXN), use_threads=False).aggregate(
        [("t", "max"), ("one", "sum"), ("name", "distinct")])
    out = []
    for src, scn, txn, ct, n, names in zip(*(g.column(c).to_pylist() for c in (
            *_TXN, "t_max", "one_sum", "name_distinct")), strict=True):
        # as Spark's collect gives a timestamp: the local wall time, naive
        local = ct.astimezone().replace(tzinfo=None) if ct is not None else None
        out.append(survey.TxnInfo(TxnId(src, int(scn or 0), txn), local, int(n),
                                  {x for x in names if x is not None}, False, None))
    return sorted(out, key=lambda t: (t.id.scn, t.id.source, t.id.txn))


def _not_done(table: pa.Table, done: set[TxnId]) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    sep = "\x1f"
    ids = pc.binary_join_element_wise(
        table.column("source_database_name"), pc.cast(table.column("commit_scn"), pa.string()),
        table.column("transaction_id"), sep)
    gone = pa.array([sep.join((t.source, str(t.scn), t.txn)) for t in done], pa.string())
    return pc.invert(pc.is_in(ids, value_set=gone))


def _joined(map_col: Any, part: str) -> pa.Array:
    """Per row, the names or types of a value map joined into one string."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys, values, offsets = _entries(map_col)
    flat = keys if part == "key" else pc.struct_field(values, ["type"])
    lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pc.fill_null(flat, "\x00"))
    return pc.binary_join(lists, "\x1e")


def _shapes(table: pa.Table) -> dict[str, survey.TableShape]:
    """:func:`.survey.tables` of plain row LCRs."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return {}
    kc = table.column("key_columns").combine_chunks()
    keys = pc.binary_join(pa.ListArray.from_arrays(
        pc.subtract(kc.offsets, kc.offsets[0]), pc.fill_null(pc.list_flatten(kc), "")), "\x1e")
    t = pa.table({
        "o": table.column("object_owner"), "n": table.column("object_name"),
        "k": pc.fill_null(keys, ""), "c": table.column("command_type"),
        "nc": _joined(table.column("new_values"), "key"),
        "nt": _joined(table.column("new_values"), "type"),
        "oc": _joined(table.column("old_values"), "key"),
        "ot": _joined(table.column("old_values"), "type"),
        "one": pa.array([1] * table.num_rows, pa.int64())})
    g = t.group_by(["o", "n", "k", "c", "nc", "nt", "oc", "ot"], use_threads=False).aggregate(
        [("one", "sum")])

    def split(s: str | None) -> list[str]:
        return s.split("\x1e") if s else []

    # A new table's columns come in the order the first shape lists them: the INSERTs'
    # (every column, as the source lists them), then the widest (Spark's survey takes
    # its groups in whatever order they come).
    groups = sorted(g.to_pylist(), key=lambda r: (r["o"], r["n"], r["c"] != "INSERT",
                                                  -len(split(r["nc"])), r["nc"], r["oc"]))
    out: dict[str, survey.TableShape] = {}
    for r in groups:
        name = f"{r['o']}.{r['n']}".lower()
        shape = out.setdefault(name, survey.TableShape(name))
        shape.n += int(r["one_sum"])
        if not shape.key_columns and r["k"]:
            shape.key_columns.extend(k.lower() for k in split(r["k"]))
        known = {c for c, _ in shape.columns}
        for names, types in ((split(r["nc"]), split(r["nt"])), (split(r["oc"]),
                                                                 split(r["ot"]))):
            for col, ltype in zip(names, types, strict=True):
                if col.lower() not in known and ltype and ltype != "\x00":
                    shape.columns.append((col.lower(), ltype))
                    known.add(col.lower())
        shape.old_columns.update(c.lower() for c in split(r["oc"]))
        if r["c"] == "UPDATE":
            shape.update_sets.append({c.lower() for c in split(r["nc"])})
    return out


# -- effects -----------------------------------------------------------------------------
def _entries(col: Any) -> tuple[Any, Any, np.ndarray]:
    """A map column's keys and values (every row's entries, in row order) and per row the
    offset of its first entry in them (``n + 1`` offsets)."""
    import numpy as np
    import pyarrow as pa

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    offsets = arr.offsets.to_numpy().astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    # a map's keys and items are its whole child arrays, whatever slice it is
    return arr.keys.slice(lo, hi - lo), arr.items.slice(lo, hi - lo), offsets - lo


class _Values:
    """One value map column (``new_values`` or ``old_values``), looked up by column."""

    def __init__(self, col: Any):
        import numpy as np

        self.keys, self.values, offsets = _entries(col)
        self.n = len(offsets) - 1
        self.parents = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(offsets))

    def find(self, column: str) -> np.ndarray:
        """Per row, the entry index of the column's value (-1: the map does not carry it)."""
        import numpy as np
        import pyarrow.compute as pc

        hit = pc.equal(self.keys, lcr_key(column))
        idx = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
        rows = self.parents[idx]
        if len(np.unique(rows)) != len(rows):
            raise NotHere(f"a value map carries {column!r} twice")
        out = np.full(self.n, -1, dtype=np.int64)
        out[rows] = idx
        return out

    def typed(self, where: np.ndarray, field: str) -> pa.Array:
        """The values at ``where`` (entry indices; -1 gives NULL), one struct field."""
        import pyarrow as pa
        import pyarrow.compute as pc

        picked = self.values.take(pa.array(where, mask=where < 0))
        return pc.struct_field(picked, [field])

    def whole(self, where: np.ndarray) -> pa.Array:
        import pyarrow as pa

        return self.values.take(pa.array(where, mask=where < 0))


def _same(a: pa.Array, b: pa.Array) -> pa.Array:
    """NULL-safe equality (``<=>``), NaN equal to NaN as in Spark."""
    import pyarrow as pa
    import pyarrow.compute as pc

    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    eq = pc.fill_null(pc.equal(a, b), False)
    if pa.types.is_floating(a.type):
        eq = pc.or_(eq, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
    return pc.or_(both_null, eq)


def effects(changes: pa.Table, table: TargetTable, compare: list[str], *,
            partial: bool) -> pa.Table:
    """:func:`.images.effects` over Arrow, for LCRs whose UPDATEs keep their key.

    Raises:
        NotHere: an UPDATE moves its key (its two effects are the Spark path's).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = changes.num_rows
    new, old = _Values(changes.column("new_values")), _Values(changes.column("old_values"))
    cmd = changes.column("command_type").combine_chunks()
    is_i = pc.equal(cmd, "INSERT").to_numpy(zero_copy_only=False)
    is_u = pc.equal(cmd, "UPDATE").to_numpy(zero_copy_only=False)
    is_d = pc.equal(cmd, "DELETE").to_numpy(zero_copy_only=False)
    types = dict(table.columns)
    where_new = {c: new.find(c) for c in table.column_names}
    where_old = {c: old.find(c) for c in {*table.key_columns, *compare}}
    for k in table.key_columns:
        o, nw = where_old[k], where_new[k]
        both = is_u & (o >= 0) & (nw >= 0)
        if both.any():
            ov, nv = old.whole(o), new.whole(nw)
            same = pa.array([True] * n)
            for i in range(ov.type.num_fields):
                f = ov.type.field(i).name
                same = pc.and_(same, _same(pc.struct_field(ov, [f]), pc.struct_field(nv, [f])))
            o_there = pc.is_valid(ov).to_numpy(zero_copy_only=False)
            n_there = pc.is_valid(nv).to_numpy(zero_copy_only=False)
            moved = both & o_there & n_there & ~same.to_numpy(zero_copy_only=False)
            if moved.any():
                raise NotHere("an UPDATE moves its key")
    cols: dict[str, Any] = {}
    for k in table.key_columns:
        field = lcr.LOGICAL_TYPES[types[k]].field
        # INSERT: the new value; DELETE: the old one; UPDATE: the old one if carried.
        use_old = is_d | (is_u & (where_old[k] >= 0))
        where = np.where(use_old, -1, where_new[k])
        from_new = new.typed(where, field)
        from_old = old.typed(np.where(use_old, where_old[k], -1), field)
        cols[k] = pc.if_else(pa.array(use_old), from_old, from_new)
    for c, t in table.columns:
        if c in table.key_columns:
            continue
        cols[c] = new.typed(np.where(is_d, -1, where_new[c]), lcr.LOGICAL_TYPES[t].field)
    kind = np.where(is_i, "I", np.where(is_u, "U", "D"))
    cols["_e_kind"] = pa.array(kind, pa.string())
    cols["_e_src"] = changes.column("source_database_name")
    cols["_e_scn"] = changes.column("commit_scn")
    cols["_e_txn"] = changes.column("transaction_id")
    cols["_e_pos"] = changes.column("position")
    cols["_e_sub"] = pa.array(np.zeros(n, dtype=np.int32))
    cols["_e_msg"] = changes.column("msg_id")
    cols["_e_absent"] = _absent(table, where_new, where_old, is_u, partial, n)
    for c in compare:
        cols[f"_o_{c}"] = old.typed(where_old[c], lcr.LOGICAL_TYPES[types[c]].field)
        cols[f"_h_{c}"] = pa.array(where_old[c] >= 0)
    return pa.table(cols)


def _absent(table: TargetTable, where_new: dict[str, np.ndarray],
            where_old: dict[str, np.ndarray], is_u: np.ndarray, partial: bool,
            n: int) -> pa.Array:
    """Per UPDATE effect, the data columns its new values lack (NULL: none or not U)."""
    import pyarrow as pa

    data = [c for c, _ in table.columns if c not in table.key_columns]
    if not partial or not data:
        return pa.nulls(n, pa.list_(pa.string()))
    lacking: list[list[str]] = [[] for _ in range(n)]
    for c in data:
        for i in (is_u & (where_new[c] < 0)).nonzero()[0].tolist():
            lacking[i].append(c)
    return pa.array([x or None for x in lacking], pa.list_(pa.string()))


def _distinct_keys(eff: pa.Table, key_columns: list[str]) -> pa.Table:
    return eff.select(key_columns).group_by(key_columns, use_threads=False).aggregate([])


def _buckets(p: Pass, rows: pa.Table, t: TargetTable) -> pa.Array:
    """Spark's bucket of each row's key (numpy, or a Spark job for other key types)."""
    import pyarrow as pa

    got = buckets_np.buckets(rows, t.key_columns, t.buckets)
    if got is not None:
        return pa.array(got, pa.int32())
    frame = p.spark.createDataFrame(rows.select(t.key_columns))
    out = frame.select(bucket_expr(t.key_columns, t.buckets).alias(BUCKET)).toArrow()
    return out.column(BUCKET).cast(pa.int32()).combine_chunks()


# -- detection ---------------------------------------------------------------------------
class _Found:
    """:func:`.conflicts.detect`'s output over Arrow: the effects joined with their keys'
    current rows, sorted by key and run order, with per row whether it is its key's
    first, a replay or superseded change (``skip``) or a conflict."""

    def __init__(self, df: pa.Table, first: np.ndarray, skip: np.ndarray,
                 conflict: np.ndarray):
        self.df, self.first, self.skip, self.conflict = df, first, skip, conflict


def _detect(eff: pa.Table, current: pa.Table | None, plan: TablePlan) -> _Found | None:
    """:func:`.conflicts.detect` over Arrow (None: nothing to detect)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    t, compare, detect = plan.table, plan.compare, plan.detect
    if (current is None and not detect) or eff.num_rows == 0:
        return None
    keys = t.key_columns
    if current is not None:
        # Arrow joins carry no list columns: join the keys and a row number, then align
        index = pa.array(np.arange(eff.num_rows, dtype=np.int64))
        left = pa.table({**{k: eff.column(k) for k in keys}, "_cf_i": index})
        got = left.join(current, keys, join_type="left outer", use_threads=False,
                        coalesce_keys=True)
        if got.num_rows != eff.num_rows:
            raise NotHere("the current rows of a key are not one")
        got = got.take(pc.sort_indices(got.column("_cf_i")))
        df = eff
        for name in current.column_names:
            if name not in keys:
                df = df.append_column(name, got.column(name))
    else:
        df = eff.append_column("_c_exists", pa.nulls(eff.num_rows, pa.bool_())) \
            .append_column("_c_src", pa.nulls(eff.num_rows, pa.string())) \
            .append_column("_c_scn", pa.nulls(eff.num_rows, pa.int64())) \
            .append_column("_c_pos", pa.nulls(eff.num_rows, pa.int64()))
        for c in compare:
            df = df.append_column(f"_c_{c}", pa.nulls(eff.num_rows, eff.column(c).type))
    # Spark's window order: ascending, NULLs first
    order = pc.sort_indices(df, sort_keys=[*[(k, "ascending", "at_start") for k in keys],
                                           *[(c, "ascending", "at_start") for c in ORDER]])
    df = df.take(order).combine_chunks()
    n = df.num_rows
    first = _firsts(df, keys)

    def arr(name: str) -> Any:
        return df.column(name).combine_chunks()

    def flag(x: Any) -> np.ndarray:
        return pc.fill_null(x, False).to_numpy(zero_copy_only=False)

    c_scn = arr("_c_scn")
    found = pc.is_valid(c_scn).to_numpy(zero_copy_only=False)
    same_src = found & flag(pc.equal(arr("_c_src"), arr("_e_src")))
    scn_eq, scn_gt = flag(pc.equal(c_scn, arr("_e_scn"))), flag(pc.greater(c_scn,
                                                                             arr("_e_scn")))
    pos_eq = flag(pc.equal(arr("_c_pos"), arr("_e_pos")))
    pos_gt = flag(pc.greater(arr("_c_pos"), arr("_e_pos")))
    skip = first & same_src & ((scn_eq & pos_eq) | scn_gt | (scn_eq & pos_gt))
    conflict = np.zeros(n, dtype=bool)
    if detect:
        kind = np.asarray(arr("_e_kind").to_pylist(), dtype=object)
        prev_kind = np.empty(n, dtype=object)
        prev_kind[1:] = kind[:-1]
        exists = np.where(first, flag(arr("_c_exists")), prev_kind != "D")
        is_i = kind == "I"
        differs = np.zeros(n, dtype=bool)
        absent = arr("_e_absent")
        for c in compare:
            col = arr(c)
            prev = pa.concat_arrays([pa.nulls(1, col.type), col.slice(0, n - 1)])
            prior = pc.if_else(pa.array(first), arr(f"_c_{c}"), prev)
            prev_absent = np.zeros(n, dtype=bool)
            if absent.null_count < n:
                lacks = flag(_contains(absent, c))
                prev_absent[1:] = lacks[:-1]
            known = first | ((prev_kind != "D") & ~prev_absent)
            had = arr(f"_h_{c}").to_numpy(zero_copy_only=False)
            differs |= had & known & ~_same(arr(f"_o_{c}"), prior).to_numpy(
                zero_copy_only=False)
        conflict = (is_i & exists) | (~is_i & ~exists) | (~is_i & differs)
    return _Found(df, first, skip, conflict)


def _settle(w: _Work, failed: set[TxnId], times: dict[TxnId, Any]) -> dict[TxnId, Any]:
    """:meth:`.tables.TablePlan.conflicts` over Arrow: detect without the failed
    transactions' effects, fold the keys in trouble exactly (:func:`.conflicts.fold`,
    with the handlers), and keep every other key's effects as they are.

    Returns:
        Transactions that fail on this table (unresolved conflicts).
    """
    import numpy as np
    import pyarrow as pa

    from changeflow.apply import conflicts

    plan = w.plan
    eff = _without(w.effects, failed)
    w.fast, w.folded = eff, None
    plan.folded, plan.resolved, plan.skipped = [], 0, 0
    found = _detect(eff, w.current, plan)
    if found is None:
        return {}
    group = np.cumsum(found.first) - 1
    groups = int(group[-1]) + 1
    size = np.bincount(group, minlength=groups)
    bad = np.bincount(group, weights=found.conflict | (found.skip & (size[group] > 1)),
                      minlength=groups)[group] > 0
    troubled = bad | (np.bincount(group, weights=found.skip, minlength=groups)[group] > 0)
    if not troubled.any():
        return {}
    rows = found.df.filter(pa.array(bad)).to_pylist()
    out = conflicts.fold(rows, plan.table, plan.compare, plan.handlers, times)
    w.fast = found.df.filter(pa.array(~troubled)).select(eff.column_names)
    if out.effects:
        w.folded = pa.Table.from_pylist([{c: r.get(c) for c in eff.column_names}
                                         for r in out.effects], schema=eff.schema)
    plan.folded, plan.resolved = out.effects, out.resolved
    plan.skipped = out.skipped + int((found.skip & ~bad).sum())
    return out.failed


def _without(eff: pa.Table, txns: set[TxnId]) -> pa.Table:
    """Effects without those of the given transactions."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not txns or eff.num_rows == 0:
        return eff
    sep = "\x1f"
    ids = pc.binary_join_element_wise(
        eff.column("_e_src"), pc.cast(eff.column("_e_scn"), pa.string()),
        eff.column("_e_txn"), sep)
    gone = pa.array([t.key for t in txns], pa.string())
    return eff.filter(pc.invert(pc.is_in(ids, value_set=gone)))


def _firsts(ranked: pa.Table, keys: list[str]) -> np.ndarray:
    """Per row of a table sorted by key, whether it is its key's first (NULL = NULL)."""
    import numpy as np

    n = ranked.num_rows
    first = np.ones(n, dtype=bool)
    if n > 1:
        same = np.ones(n - 1, dtype=bool)
        for k in keys:
            col = ranked.column(k)
            same &= _same(col.slice(1), col.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        first[1:] = ~same
    return first


def _contains(lists: pa.Array, value: str) -> pa.Array:
    import pyarrow as pa

    return pa.array([None if x is None else value in x for x in lists.to_pylist()])


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
    last = ranked.filter(pa.array(_firsts(ranked, keys)))
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


__all__ = ["ENABLED", "MAX_LCRS", "NotHere", "effects", "run"]
