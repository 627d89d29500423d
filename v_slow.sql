-- shardflake id generator for schema gx_slow, shard 9
BEGIN;

DO $shardflake$ BEGIN PERFORM pg_catalog.pg_advisory_xact_lock(x'5346'::int, pg_catalog.hashtext('gx_slow')); END $shardflake$;

CREATE SCHEMA IF NOT EXISTS "gx_slow";

DO $shardflake$
DECLARE
  comment text;
  present boolean;
  existing jsonb;
  wanted jsonb := '{"shardflake":"generator","version":3,"shard":9,"layout":"instagram","epoch":1314220021721,"timeUnitMs":1,"fields":"time:time:41,shard:shard:13,sequence:sequence:10"}'::jsonb;
BEGIN
  SELECT pg_catalog.obj_description(p.oid, 'pg_proc') INTO comment FROM pg_catalog.pg_proc p
  WHERE p.pronamespace = 'gx_slow'::regnamespace
    AND p.proname = 'next_id' AND p.pronargs = 0;
  present := FOUND;
  IF comment LIKE '{%' THEN
    BEGIN
      existing := comment::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
      existing := NULL;
    END;
  END IF;
  IF existing->>'shardflake' IS DISTINCT FROM 'generator' THEN
    existing := NULL;
  END IF;
  IF NOT present THEN
    RETURN;
  END IF;
  IF existing IS NULL THEN
    RAISE EXCEPTION 'schema % has a next_id() that shardflake did not install; to take it over, install with --replace (library: replace: true)',
      'gx_slow'
      USING ERRCODE = 'SF002';
  END IF;
  IF (existing->>'version')::int > (wanted->>'version')::int THEN
    RAISE EXCEPTION 'schema % has generator version %, newer than this install (%)',
      'gx_slow', existing->>'version', wanted->>'version'
      USING ERRCODE = 'SF002';
  END IF;
  IF (existing - 'version' - 'guard') IS DISTINCT FROM (wanted - 'version') THEN
    RAISE EXCEPTION 'schema % already has a generator for shard % (layout %, epoch %), not shard % (layout %, epoch %)',
      'gx_slow', existing->>'shard', existing->>'layout', existing->>'epoch',
      wanted->>'shard', wanted->>'layout', wanted->>'epoch'
      USING ERRCODE = 'SF002';
  END IF;
END
$shardflake$;

CREATE SEQUENCE IF NOT EXISTS "gx_slow"."next_id_counter" AS bigint INCREMENT 1 MINVALUE 0 START 0 CACHE 1 NO CYCLE;

DO $shardflake$
DECLARE
  comment text;
  present boolean;
  existing jsonb;
  installed int;
  last bigint;
  called boolean;
  tick bigint;
BEGIN
  SELECT pg_catalog.obj_description(p.oid, 'pg_proc') INTO comment FROM pg_catalog.pg_proc p
  WHERE p.pronamespace = 'gx_slow'::regnamespace
    AND p.proname = 'next_id' AND p.pronargs = 0;
  present := FOUND;
  IF comment LIKE '{%' THEN
    BEGIN
      existing := comment::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
      existing := NULL;
    END;
  END IF;
  IF existing->>'shardflake' IS DISTINCT FROM 'generator' THEN
    existing := NULL;
  END IF;
  -- The version of the shardflake generator found here, NULL when there is none.
  installed := (existing->>'version')::int;
  IF installed IS NULL OR installed >= 3 THEN
    RETURN;
  END IF;
  ALTER SEQUENCE "gx_slow"."next_id_counter" INCREMENT BY 1 MINVALUE 0 MAXVALUE 9223372036854775807;
  SELECT last_value, is_called INTO last, called FROM "gx_slow"."next_id_counter";
  IF called THEN
    tick := CASE installed WHEN 1 THEN last >> 23 ELSE last & (1099511627775)::bigint END;
    PERFORM pg_catalog.setval('"gx_slow"."next_id_counter"'::regclass, ((tick + 1) << 23) | (9216)::bigint, true);
  END IF;
END
$shardflake$;

COMMENT ON SEQUENCE "gx_slow"."next_id_counter" IS 'shardflake id counter: the last id handed out (or past it); only next_id() and its slow path may touch it';

CREATE OR REPLACE FUNCTION "gx_slow"."next_id_new_era"() RETURNS bigint
  LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $shardflake$
-- The slow path of next_id(): see the correctness argument in shardflake's src/postgres/generator-sql.ts.
DECLARE
  lock_key constant bigint := ((x'5346'::bigint << 32) | '"gx_slow"."next_id_counter"'::regclass::oid::bigint);
  c bigint;
  era bigint;
  id bigint;
  -- Results assigned instead of PERFORMed: PL/pgSQL evaluates an assignment as a simple expression, several times
  -- cheaper than PERFORM's full statement.
  locked text;
  released boolean;
BEGIN
  locked := pg_catalog.pg_advisory_lock(lock_key)::text;
  BEGIN
    c := pg_catalog.nextval('"gx_slow"."next_id_counter"'::regclass);
    IF ((c - (pg_catalog.floor(((pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000::float8) - 1314220021721::float8))::bigint << 23)) & (-9223372036846388224)::bigint) = (9216)::bigint THEN
      -- Another slow path already started a new era: keep the value, as the fast path would.
      id := c;
    ELSE
      -- A new era: after the clock, and after the era read under the key (so every store is above every fetch).
      era := GREATEST(pg_catalog.floor(((pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000::float8) - 1314220021721::float8))::bigint, (c >> 23) + 1);
      IF era > 1099511627775 THEN
        RAISE EXCEPTION 'shardflake generator in schema % is exhausted: tick % does not fit layout %',
          'gx_slow', era, 'instagram' USING ERRCODE = '22003';
      END IF;
      id := pg_catalog.setval('"gx_slow"."next_id_counter"'::regclass, ((era) << 23) | (9216)::bigint, true);
    END IF;
    released := pg_catalog.pg_advisory_unlock(lock_key);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(lock_key);
    RAISE;
  END;
  RETURN id;
END
$shardflake$;

CREATE OR REPLACE FUNCTION "gx_slow"."next_id_catch_up"(above_id bigint DEFAULT NULL) RETURNS bigint
  LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $shardflake$
-- The slow path of next_id(): see the correctness argument in shardflake's src/postgres/generator-sql.ts.
DECLARE
  lock_key constant bigint := ((x'5346'::bigint << 32) | '"gx_slow"."next_id_counter"'::regclass::oid::bigint);
  c bigint;
  era bigint;
  id bigint;
  -- Results assigned instead of PERFORMed: PL/pgSQL evaluates an assignment as a simple expression, several times
  -- cheaper than PERFORM's full statement.
  locked text;
  released boolean;
BEGIN
  locked := pg_catalog.pg_advisory_lock(lock_key)::text;
  BEGIN
    c := pg_catalog.nextval('"gx_slow"."next_id_counter"'::regclass);
    IF ((c - (pg_catalog.floor(((pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000::float8) - 1314220021721::float8))::bigint << 23)) & (-9223372036846388224)::bigint) = (9216)::bigint AND (above_id IS NULL OR above_id < c) THEN
      -- Another slow path already started a new era: keep the value, as the fast path would.
      id := c;
    ELSE
      -- A new era: after the clock, and after the era read under the key (so every store is above every fetch).
      era := GREATEST(pg_catalog.floor(((pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000::float8) - 1314220021721::float8))::bigint, (c >> 23) + 1, COALESCE(((above_id >> 23) & (2199023255551)::bigint) + 1, 0));
      IF era > 1099511627775 THEN
        RAISE EXCEPTION 'shardflake generator in schema % is exhausted: tick % does not fit layout %',
          'gx_slow', era, 'instagram' USING ERRCODE = '22003';
      END IF;
      id := pg_catalog.setval('"gx_slow"."next_id_counter"'::regclass, ((era) << 23) | (9216)::bigint, true);
    END IF;
    released := pg_catalog.pg_advisory_unlock(lock_key);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(lock_key);
    RAISE;
  END;
  RETURN id;
END
$shardflake$;

CREATE OR REPLACE FUNCTION "gx_slow"."next_id"() RETURNS bigint
  LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $shardflake$
BEGIN
  RETURN CASE
    WHEN ((pg_catalog.nextval('"gx_slow"."next_id_counter"'::regclass) - (pg_catalog.floor(((pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000::float8) - 1314220021721::float8))::bigint << 23)) & (-9223372036846388224)::bigint) = (9216)::bigint
    THEN pg_catalog.currval('"gx_slow"."next_id_counter"'::regclass)
    ELSE "gx_slow"."next_id_new_era"()
  END;
END
$shardflake$;

CREATE OR REPLACE FUNCTION "gx_slow"."next_id_last_issued"() RETURNS bigint
  LANGUAGE sql VOLATILE PARALLEL UNSAFE
  BEGIN ATOMIC
    SELECT CASE WHEN is_called THEN last_value END FROM "gx_slow"."next_id_counter";
  END;

DO $shardflake$
BEGIN
  IF pg_catalog.to_regprocedure('"gx_slow"."next_id_target_of"(bigint)') IS NOT NULL THEN
    DROP FUNCTION "gx_slow"."next_id_target_of"(bigint);
  END IF;
  IF pg_catalog.to_regclass('"gx_slow"."next_id_guard"') IS NOT NULL THEN
    DROP SEQUENCE "gx_slow"."next_id_guard";
  END IF;
END
$shardflake$;

CREATE OR REPLACE FUNCTION "gx_slow"."id_to_timestamp"(id bigint) RETURNS timestamptz
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN 'epoch'::timestamptz + (((id >> 23) * 1 + 1314220021721) * interval '1 millisecond');

CREATE OR REPLACE FUNCTION "gx_slow"."id_to_shard"(id bigint) RETURNS integer
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN ((id >> 10) & 8191)::integer;

CREATE OR REPLACE FUNCTION "gx_slow"."timestamp_to_min_id"(ts timestamptz) RETURNS bigint
  LANGUAGE sql STABLE STRICT PARALLEL SAFE
  RETURN GREATEST(0::numeric, LEAST(1099511627775::numeric,
    pg_catalog.floor((EXTRACT(epoch FROM ts) * 1000 - 1314220021721) / 1)))::bigint << 23;

COMMENT ON FUNCTION "gx_slow"."next_id"() IS '{"shardflake":"generator","version":3,"shard":9,"layout":"instagram","epoch":1314220021721,"timeUnitMs":1,"fields":"time:time:41,shard:shard:13,sequence:sequence:10"}';

COMMIT;
