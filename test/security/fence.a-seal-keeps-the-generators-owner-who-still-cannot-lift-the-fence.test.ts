import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import {
  FENCE_FUNCTION,
  FENCED_ROLE,
  isSealed,
  sealOldCopiesSql,
} from '../../packages/shardflake/src/fence/fence.js';
import { ddlPastGuard } from '../../packages/shardflake/src/move/ddl-guard.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { countRows, makeCluster, withClient } from '../move/fixture.js';
import { attempt } from '../support/attempt.js';
import { useServers } from '../support/postgres.js';

/** Every routine of `schema` with its owner, in name order. */
async function routineOwners(url: string, schema: string): Promise<[string, string][]> {
  return withClient(url, async (c) => {
    const { rows } = await c.query(
      `SELECT p.proname::text AS name, p.proowner::regrole::text AS owner FROM pg_proc p
        WHERE p.pronamespace = $1::regnamespace ORDER BY p.oid::regprocedure::text`,
      [`"${schema}"`],
    );
    return (rows as { name: string; owner: string }[]).map((r) => [r.name, r.owner]);
  });
}

/**
 * A seal gives the old copy's fence function to `shardflake_fenced` and leaves the shard's other routines (the
 * generator's next_id family) with their owner: ten ALTER ROUTINEs per shard grew with the shards on the server
 * (fence.ts). Here the application's role owns the shard's schema, tables and every routine, as when it ran
 * `cluster init` itself, and after the move it tries every way through those routines to the fence: replacing,
 * renaming, altering, dropping or moving them, and the fence function. Each is refused, a write still gets SF001,
 * and no row changes. A seal made before (every routine fenced) still counts as sealed, and sealing either shape
 * again changes nothing.
 */
test('a sealed copy whose generators keep their owner: that owner cannot replace, alter, drop or move a routine, nor reach the fence', async () => {
  const servers = await useServers(2);
  const config = await makeCluster(servers, 4);
  const aUrl = config.servers.a as string;
  const onA = (await withClient(aUrl, readShardMap)).shards
    .filter((s) => s.server === 'a')
    .map((s) => s.shard);
  assert.ok(onA.length >= 2, 'two shards on server a');
  const [moved, staying] = onA as [number, number];
  const s = shardSchema(config, moved);
  const live = shardSchema(config, staying);
  const password = randomBytes(18).toString('base64url');
  const u = new URL(aUrl);
  u.username = 'app';
  u.password = password;
  const appUrl = u.toString();

  await withClient(aUrl, async (c) => {
    await c.query(`CREATE ROLE app LOGIN PASSWORD '${password}'`);
    // A schema of its own, where it may create: somewhere to move a routine to.
    await c.query('CREATE SCHEMA app_own AUTHORIZATION app');
    await c.query(`INSERT INTO "${s}".items (note) VALUES ('before the move')`);
    await c.query(`DO $$ DECLARE r record; BEGIN
      FOR r IN SELECT oid::regclass AS rel FROM pg_class WHERE relnamespace = '"${s}"'::regnamespace AND relkind = 'r' LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO app', r.rel);
      END LOOP;
      FOR r IN SELECT oid::regprocedure AS fn FROM pg_proc WHERE pronamespace = '"${s}"'::regnamespace LOOP
        EXECUTE format('ALTER ROUTINE %s OWNER TO app', r.fn);
      END LOOP;
      ALTER SCHEMA "${s}" OWNER TO app;
    END $$`);
  });

  await moveShard(config, moved, 'b');
  assert.ok(await withClient(aUrl, (c) => isSealed(c, s)), 'the old copy is sealed');
  const owners = await routineOwners(aUrl, s);
  assert.ok(owners.length >= 5, 'the generator and the fence');
  for (const [name, owner] of owners) {
    assert.equal(owner, name === FENCE_FUNCTION ? FENCED_ROLE : 'app', `owner of ${name} after the seal`);
  }

  const q = (name: string) => `"${s}".${name}`;
  const rowsBefore = await countRows(aUrl, s);
  const tries: [string, string, string][] = [
    // [what, SQL, SQLSTATE expected]
    ['a stale write', `INSERT INTO ${q('items')} (note) VALUES ('lost')`, 'SF001'],
    [
      'replace next_id',
      `CREATE OR REPLACE FUNCTION ${q('next_id')}() RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'`,
      '42501',
    ],
    ['rename next_id', `ALTER FUNCTION ${q('next_id')}() RENAME TO next_id_old`, '42501'],
    ['make next_id SECURITY DEFINER', `ALTER FUNCTION ${q('next_id')}() SECURITY DEFINER`, '42501'],
    ['give next_id a search_path', `ALTER FUNCTION ${q('next_id')}() SET search_path = app_own`, '42501'],
    ['comment on next_id', `COMMENT ON FUNCTION ${q('next_id')}() IS 'mine'`, '42501'],
    ['drop next_id with its defaults', `DROP FUNCTION ${q('next_id')}() CASCADE`, '42501'],
    ['drop next_id_bulk', `DROP FUNCTION ${q('next_id_bulk')}`, '42501'],
    // next_id is what the tables' defaults run: moving it out is refused wherever it would land.
    ['move next_id out', `ALTER FUNCTION ${q('next_id')}() SET SCHEMA app_own`, '42501'],
    ['plant a routine', `CREATE FUNCTION ${q('planted')}() RETURNS int LANGUAGE sql AS 'SELECT 1'`, '42501'],
    ['drop the fence function', `DROP FUNCTION ${q(FENCE_FUNCTION)}() CASCADE`, '42501'],
    [
      'replace the fence function',
      `CREATE OR REPLACE FUNCTION ${q(FENCE_FUNCTION)}() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RETURN NULL; END $f$`,
      '42501',
    ],
    // Moved to a schema of its own and replaced there, the triggers (which call it by oid) would let writes by.
    ['move the fence function out', `ALTER FUNCTION ${q(FENCE_FUNCTION)}() SET SCHEMA app_own`, '42501'],
    ['disable the fence', `ALTER TABLE ${q('items')} DISABLE TRIGGER ${FENCE_FUNCTION}`, '42501'],
    ['a stale write after all that', `INSERT INTO ${q('items')} (note) VALUES ('lost')`, 'SF001'],
  ];
  for (const [what, sql, expected] of tries) {
    assert.equal(await attempt(appUrl, sql), expected, `former owner: ${what}`);
  }
  // A superuser's script moving the fence function out of the way: the guard refuses it too.
  assert.equal(
    await attempt(aUrl, `ALTER FUNCTION ${q(FENCE_FUNCTION)}() SET SCHEMA app_own`),
    '42501',
    'superuser: move the fence function out',
  );
  assert.equal(
    await attempt(aUrl, `ALTER FUNCTION ${q('next_id')}() OWNER TO app`),
    '42501',
    'superuser: alter a routine of the sealed copy',
  );
  // What the guard does not stand in the way of: a routine of a shard that did not move.
  assert.equal(
    await attempt(
      aUrl,
      `CREATE OR REPLACE FUNCTION "${live}".migrated() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
    ),
    'ok',
    'a live shard migrates its routines',
  );
  assert.deepEqual(await routineOwners(aUrl, s), owners, 'no routine changed');
  assert.equal(await countRows(aUrl, s), rowsBefore, 'no row changed on the old copy');
  assert.ok(await withClient(aUrl, (c) => isSealed(c, s)), 'still sealed');

  // Sealed again (a resumed move, cleanup): nothing changes.
  await withClient(aUrl, (c) => ddlPastGuard(c, sealOldCopiesSql([s])));
  assert.deepEqual(await routineOwners(aUrl, s), owners, 'a second seal changes no owner');

  // A seal of before this change: every routine fenced. Still sealed, and sealing it again keeps it so.
  await withClient(aUrl, (c) =>
    ddlPastGuard(
      c,
      `DO $$ DECLARE r record; BEGIN
        FOR r IN SELECT oid::regprocedure AS fn FROM pg_proc WHERE pronamespace = '"${s}"'::regnamespace LOOP
          EXECUTE format('ALTER ROUTINE %s OWNER TO ${FENCED_ROLE}', r.fn);
        END LOOP;
      END $$`,
    ),
  );
  assert.ok(await withClient(aUrl, (c) => isSealed(c, s)), 'an old seal is sealed');
  await withClient(aUrl, (c) => ddlPastGuard(c, sealOldCopiesSql([s])));
  for (const [name, owner] of await routineOwners(aUrl, s)) {
    assert.equal(owner, FENCED_ROLE, `old seal sealed again: owner of ${name}`);
  }
  assert.equal(
    await attempt(aUrl, `ALTER FUNCTION ${q('next_id')}() OWNER TO app`),
    '42501',
    'superuser: hand a routine of an old seal back',
  );
  assert.equal(await attempt(appUrl, `INSERT INTO ${q('items')} (note) VALUES ('lost')`), 'SF001');

  // Whatever a routine other than the fence does, no write reaches it: the fence fires before the statement
  // computes a row, its defaults or its subqueries. next_id replaced (past the guard) by one that raises XX999:
  await withClient(aUrl, (c) =>
    ddlPastGuard(
      c,
      `CREATE OR REPLACE FUNCTION ${q('next_id')}() RETURNS bigint LANGUAGE plpgsql AS $f$
       BEGIN RAISE EXCEPTION USING ERRCODE = 'XX999', MESSAGE = 'next_id ran'; END $f$`,
    ),
  );
  assert.equal(await attempt(aUrl, `SELECT ${q('next_id')}()`), 'XX999', 'called alone, it runs');
  const writes: [string, string][] = [
    [appUrl, `INSERT INTO ${q('items')} (note) SELECT 'lost' FROM generate_series(1, 3)`],
    [appUrl, `INSERT INTO ${q('items')} (id, note) VALUES ((SELECT ${q('next_id')}()), 'lost')`],
    [
      appUrl,
      `WITH n AS (SELECT ${q('next_id')}() AS id) INSERT INTO ${q('items')} (id, note) SELECT id, 'lost' FROM n`,
    ],
    [aUrl, `COPY ${q('items')} (note) FROM PROGRAM 'printf "lost\\nlost\\n"'`],
    [aUrl, `SET session_replication_role = replica; INSERT INTO ${q('items')} (note) VALUES ('lost')`],
  ];
  for (const [url, sql] of writes) {
    assert.equal(await attempt(url, sql), 'SF001', sql);
  }
  assert.equal(await countRows(aUrl, s), rowsBefore, 'no row changed on the old copy');

  // A fence function given back to a login role is no seal: isSealed says so.
  await withClient(aUrl, (c) => ddlPastGuard(c, `ALTER FUNCTION ${q(FENCE_FUNCTION)}() OWNER TO app`));
  assert.equal(await withClient(aUrl, (c) => isSealed(c, s)), false, 'fence function not fenced: not sealed');
});
