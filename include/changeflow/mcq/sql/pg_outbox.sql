-- changeflow Meta Change Queue: the change-log trigger for a source database that does
-- not hold the MCQ tables (the state store is elsewhere: SQLite, another server).
--
-- The trigger writes each log call into a local change log, @OUTBOX@.changeflow_mcq_log,
-- inside the source's own transaction; `changeflow mcq pump` moves the rows into the
-- MCQ store (fanning them out to the interested listeners there) and deletes them, so a
-- source never waits for, or fails because of, the MCQ store. Arguments as for
-- changeflow_mcq_log (pg_trigger.sql); the strictness is applied by the pump, which
-- knows the registry.
CREATE SCHEMA IF NOT EXISTS @OUTBOX@;

CREATE TABLE IF NOT EXISTS @OUTBOX@.changeflow_mcq_log (
  log_id      bigserial PRIMARY KEY,
  tname       varchar(64) NOT NULL,
  subtype     varchar(64) NOT NULL DEFAULT '',
  rrowid      varchar(255),
  change_type char(1) NOT NULL,
  person_id   bigint,
  pkey_string varchar(255),
  pkey_number bigint,
  aux_string  varchar(255),
  entry_date  timestamptz NOT NULL DEFAULT now(),
  origin      text
);

CREATE OR REPLACE FUNCTION @OUTBOX@.changeflow_mcq_capture() RETURNS trigger
LANGUAGE plpgsql AS $changeflow$
DECLARE
  rec     jsonb;
  v_rowid text;
BEGIN
  IF TG_OP = 'DELETE' THEN rec := to_jsonb(OLD); ELSE rec := to_jsonb(NEW); END IF;
  SELECT string_agg(rec ->> btrim(c), ',' ORDER BY n) INTO v_rowid
    FROM unnest(string_to_array(nullif(TG_ARGV[6], ''), ',')) WITH ORDINALITY AS k(c, n);
  INSERT INTO @OUTBOX@.changeflow_mcq_log
         (tname, subtype, rrowid, change_type, person_id, pkey_string, pkey_number,
          aux_string, origin)
  VALUES (TG_ARGV[0], coalesce(TG_ARGV[1], ''), v_rowid,
          CASE TG_OP WHEN 'INSERT' THEN 'I' WHEN 'UPDATE' THEN 'C' ELSE 'D' END,
          (rec ->> nullif(TG_ARGV[2], ''))::bigint, left(rec ->> nullif(TG_ARGV[3], ''), 255),
          (rec ->> nullif(TG_ARGV[4], ''))::bigint, left(rec ->> nullif(TG_ARGV[5], ''), 255),
          format('trigger %s on %s.%s by %s (application %s)', TG_NAME, TG_TABLE_SCHEMA,
                 TG_TABLE_NAME, session_user, current_setting('application_name')));
  RETURN NULL;
END
$changeflow$;
