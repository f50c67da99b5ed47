-- changeflow Meta Change Queue: the log trigger function (seed 004, Figure 8), PostgreSQL.
--
-- Installed by `changeflow mcq install-trigger` in the database that holds the MCQ
-- tables (the state store), in their schema (@MCQ@ below). One function serves every
-- source table: each trigger passes its (table, subtype) and the columns its keys come
-- from as arguments:
--   0 tname, 1 subtype ('' none), 2 person_id column, 3 pkey_string column,
--   4 pkey_number column, 5 aux_string column ('' none), 6 row-id columns (comma
--   separated, the table's primary key by default), 7 'strict' or 'warn'.
-- It runs inside the source's own transaction: the entries commit with the change, or
-- not at all. One entry per interested listener (meta_change_interests), as
-- Meta_Change_Rtn.Log_Update does; the first log of a pair records PG_CONTEXT and the
-- statement as its call stack (again whenever stack_date is cleared).
CREATE OR REPLACE FUNCTION @MCQ@.changeflow_mcq_log() RETURNS trigger
LANGUAGE plpgsql AS $changeflow$
DECLARE
  rec        jsonb;
  v_tname    text := TG_ARGV[0];
  v_subtype  text := coalesce(TG_ARGV[1], '');
  v_type     text := CASE TG_OP WHEN 'INSERT' THEN 'I' WHEN 'UPDATE' THEN 'C' ELSE 'D' END;
  v_known    boolean;
  v_stacked  timestamptz;
  v_context  text;
  v_rowid    text;
BEGIN
  IF TG_OP = 'DELETE' THEN rec := to_jsonb(OLD); ELSE rec := to_jsonb(NEW); END IF;
  SELECT true, stack_date INTO v_known, v_stacked
    FROM @MCQ@.meta_change_tables WHERE tname = v_tname AND subtype = v_subtype;
  IF v_known IS NULL THEN
    IF TG_ARGV[7] = 'strict' THEN
      RAISE EXCEPTION 'changeflow mcq: log call for unknown table %/% from trigger % on %.%',
        v_tname, v_subtype, TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME
        USING HINT = 'register it: changeflow mcq table add';
    END IF;
    RAISE WARNING 'changeflow mcq: unknown table %/% (trigger % on %.%): change dropped',
      v_tname, v_subtype, TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME;
    RETURN NULL;
  END IF;
  IF v_stacked IS NULL THEN
    GET DIAGNOSTICS v_context = PG_CONTEXT;
    UPDATE @MCQ@.meta_change_tables
       SET call_stack = left(format(E'trigger %s on %s.%s by %s (application %s): %s\n%s',
                                    TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, session_user,
                                    current_setting('application_name'),
                                    left(current_query(), 600), v_context), 2000),
           stack_date = now()
     WHERE tname = v_tname AND subtype = v_subtype AND stack_date IS NULL;
  END IF;
  SELECT string_agg(rec ->> btrim(c), ',' ORDER BY n) INTO v_rowid
    FROM unnest(string_to_array(nullif(TG_ARGV[6], ''), ',')) WITH ORDINALITY AS k(c, n);
  INSERT INTO @MCQ@.meta_change_queue
         (tname, subtype, rrowid, change_type, person_id, pkey_string, pkey_number,
          aux_string, entry_date, lane, queue_name, proc_name, retry_count)
  SELECT v_tname, v_subtype, v_rowid, v_type,
         (rec ->> nullif(TG_ARGV[2], ''))::bigint, left(rec ->> nullif(TG_ARGV[3], ''), 255),
         (rec ->> nullif(TG_ARGV[4], ''))::bigint, left(rec ->> nullif(TG_ARGV[5], ''), 255),
         now(), 0, w.proc_name, w.proc_name, 0
    FROM (SELECT DISTINCT proc_name FROM @MCQ@.meta_change_interests
           WHERE tname = v_tname AND subtype IN (v_subtype, '*')) AS w;
  RETURN NULL;
END
$changeflow$;
