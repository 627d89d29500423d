import assert from 'node:assert/strict';
import { test } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { moveSets } from '../../packages/shardflake/src/move/move.js';
import { useServers } from '../support/postgres.js';
import { withClient } from './fixture.js';

/**
 * Everything PostgreSQL records about one schema, as sorted lines of text with no oid in them: relations, columns
 * and their defaults, indexes, constraints (with their comments and whether they are validated), routines (their
 * whole definition, owner, rights and comment), triggers, sequences, row types, the comments and rights of the
 * schema, and every dependency recorded from one of its objects (a foreign key's own triggers are named after
 * their oids: the number is left out). Two schemas of the same name that print the same
 * lines were made the same way.
 */
const DESCRIBE_SQL = `
WITH ns AS (SELECT oid, nspname, nspowner, nspacl FROM pg_namespace WHERE nspname = $1),
rels AS (SELECT c.* FROM pg_class c JOIN ns ON c.relnamespace = ns.oid),
procs AS (SELECT p.* FROM pg_proc p JOIN ns ON p.pronamespace = ns.oid),
objects AS (
  SELECT 'pg_class'::regclass AS classid, oid AS objid FROM rels
  UNION ALL SELECT 'pg_proc'::regclass, oid FROM procs
  UNION ALL SELECT 'pg_type'::regclass, t.oid FROM pg_type t JOIN ns ON t.typnamespace = ns.oid
  UNION ALL SELECT 'pg_constraint'::regclass, k.oid FROM pg_constraint k JOIN ns ON k.connamespace = ns.oid
  UNION ALL SELECT 'pg_attrdef'::regclass, d.oid FROM pg_attrdef d JOIN rels ON d.adrelid = rels.oid
  UNION ALL SELECT 'pg_trigger'::regclass, g.oid FROM pg_trigger g JOIN rels ON g.tgrelid = rels.oid)
-- Foreign keys' internal triggers are named after their oids.
SELECT regexp_replace(line, 'RI_ConstraintTrigger_([ac])_[0-9]+', 'RI_ConstraintTrigger_\\1_…', 'g') AS line FROM (
  SELECT format('schema owner %s acl %s comment %s', nspowner::regrole, nspacl, obj_description(oid, 'pg_namespace'))
    AS line FROM ns
  UNION ALL
  SELECT format('relation %s kind %s persistence %s owner %s acl %s options %s comment %s', relname, relkind,
                relpersistence, relowner::regrole, relacl, reloptions, obj_description(oid, 'pg_class'))
    FROM rels
  UNION ALL
  SELECT format('column %s.%s #%s %s not null %s default %s identity %s generated %s collation %s', c.relname,
                a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated, a.attcollation::regcollation)
    FROM rels c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
   WHERE c.relkind IN ('r', 'p', 'v', 'm')
  UNION ALL
  SELECT format('index %s valid %s: %s', c.relname, i.indisvalid, pg_get_indexdef(i.indexrelid))
    FROM rels c JOIN pg_index i ON i.indexrelid = c.oid
  UNION ALL
  SELECT format('constraint %s on %s validated %s deferrable %s: %s comment %s', k.conname, k.conrelid::regclass,
                k.convalidated, k.condeferrable, pg_get_constraintdef(k.oid), obj_description(k.oid, 'pg_constraint'))
    FROM pg_constraint k JOIN ns ON k.connamespace = ns.oid
  UNION ALL
  SELECT format('routine %s owner %s acl %s comment %s: %s', p.oid::regprocedure, p.proowner::regrole, p.proacl,
                obj_description(p.oid, 'pg_proc'), pg_get_functiondef(p.oid))
    FROM procs p
  UNION ALL
  SELECT format('trigger %s on %s enabled %s: %s', g.tgname, g.tgrelid::regclass, g.tgenabled, pg_get_triggerdef(g.oid))
    FROM pg_trigger g JOIN rels c ON g.tgrelid = c.oid
  UNION ALL
  SELECT format('sequence %s %s start %s increment %s min %s max %s cache %s cycle %s', c.relname,
                s.seqtypid::regtype, s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle)
    FROM rels c JOIN pg_sequence s ON s.seqrelid = c.oid
  UNION ALL
  SELECT format('type %s type %s', t.typname, t.typtype) FROM pg_type t JOIN ns ON t.typnamespace = ns.oid
  UNION ALL
  SELECT format('depends %s -> %s (%s)', pg_describe_object(d.classid, d.objid, d.objsubid),
                pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), d.deptype)
    FROM pg_depend d JOIN objects o ON o.classid = d.classid AND o.objid = d.objid
) described ORDER BY 1`;

async function describe(url: string, schema: string): Promise<string[]> {
  return withClient(url, async (c) =>
    (await c.query(DESCRIBE_SQL, [schema])).rows.map((r: { line: string }) => r.line),
  );
}

/**
 * A set makes its target copies its own way (many shards per transaction, the fences of all of them at once,
 * secondary indexes dropped before the copy and built again after it). Whatever it changes in how, a shard it
 * moved must come out with exactly the catalog `cluster init` gives that shard: the same tables, columns,
 * defaults, indexes, constraints and id rule, the same generator functions and comments, nothing of its fence
 * left, and the same dependencies between them.
 */
test('the copies a set makes on its target have exactly the catalog cluster init makes', async () => {
  const servers = await useServers(2);
  const [a, b] = servers as [(typeof servers)[0], (typeof servers)[0]];
  const config = validateConfig(
    {
      servers: { a: a.url, b: b.url },
      catalog: 'a',
      logicalShards: 8,
      epoch: '2024-01-01T00:00:00Z',
      tables: {
        users: [
          "CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), email text NOT NULL, name text, CHECK (name <> ''))",
          'CREATE UNIQUE INDEX users_email ON users (lower(email))',
        ],
        photos: [
          'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL REFERENCES users (id), caption text, taken_at timestamptz DEFAULT now())',
          'CREATE INDEX photos_user ON photos (user_id, id)',
        ],
      },
      migrations: [
        { version: 1, name: 'likes', sql: 'ALTER TABLE photos ADD COLUMN likes integer NOT NULL DEFAULT 0' },
        { version: 2, name: 'likes index', sql: 'CREATE INDEX CONCURRENTLY photos_likes ON photos (likes)' },
      ],
      lookups: { user_email: { table: 'users', column: 'email', unique: true } },
    },
    'catalog comparison',
  );
  await initCluster(config); // shards 0–3 on a, 4–7 on b
  const moved = [0, 1, 2];
  const made = new Map<number, string[]>();
  for (const shard of moved) {
    const lines = await describe(a.url, shardSchema(config, shard));
    assert.ok(
      lines.some((l) =>
        l.startsWith(
          `constraint _shardflake_id_in_this_shard on ${shardSchema(config, shard)}.photos validated t `,
        ),
      ),
      'init put the id rule on photos',
    );
    made.set(shard, lines);
  }

  await moveSets(
    config,
    moved.map((shard) => ({ shard, to: 'b' })),
  );

  for (const shard of moved) {
    const byInit = made.get(shard) ?? [];
    const bySet = await describe(b.url, shardSchema(config, shard));
    // The lines on one side only, so that a failure names what differs.
    assert.deepEqual(
      {
        onlyInTheSetsCopy: bySet.filter((l) => !byInit.includes(l)),
        onlyInInitsCopy: byInit.filter((l) => !bySet.includes(l)),
      },
      { onlyInTheSetsCopy: [], onlyInInitsCopy: [] },
      `shard ${shard}`,
    );
    assert.deepEqual(bySet, byInit, `shard ${shard}: the same lines, as often`);
  }
});
