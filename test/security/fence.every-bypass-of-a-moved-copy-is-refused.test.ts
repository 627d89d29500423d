import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { FENCED_ROLE, isSealed } from '../../packages/shardflake/src/fence/fence.js';
import { cleanupCluster } from '../../packages/shardflake/src/move/cleanup.js';
import { moveShard, moveShards } from '../../packages/shardflake/src/move/move.js';
import { countRows, makeCluster, schemaOn, withClient } from '../move/fixture.js';
import { attempt } from '../support/attempt.js';
import { useServers } from '../support/postgres.js';

/** The URL of `url`'s server for another role. */
function as(url: string, user: string, password: string): string {
  const u = new URL(url);
  u.username = user;
  u.password = password;
  return u.toString();
}

/**
 * The old copy of a moved shard is where a stale tool's write would vanish (cleanup drops it). Every way around
 * the fence that the security review found is tried here on real servers, by the role that owned the shard's
 * tables before the move (the usual config role of an application) and by a superuser's replica-mode session:
 * each is refused and no row changes. Both move engines (one shard; a set) seal their old copies. Only cluster
 * cleanup removes them.
 */
test('a sealed old copy refuses replica mode, its former owner disabling or dropping the fence, and stale writes; only cleanup lifts it', async () => {
  const servers = await useServers(2);
  const config = await makeCluster(servers, 6);
  const aUrl = config.servers.a as string;
  const onA = (await withClient(aUrl, readShardMap)).shards
    .filter((s) => s.server === 'a')
    .map((s) => s.shard);
  assert.ok(onA.length >= 3, 'three shards on server a');
  const [single, inSet, third] = onA as [number, number, number];
  const password = randomBytes(18).toString('base64url');
  const appUrl = as(aUrl, 'app', password);

  // The application's role owns the shards' schemas and tables, as when its own role runs cluster init.
  await withClient(aUrl, async (c) => {
    await c.query(`CREATE ROLE app LOGIN PASSWORD '${password}'`);
    for (const shard of [single, inSet, third]) {
      const s = shardSchema(config, shard);
      await c.query(`INSERT INTO "${s}".items (note) VALUES ('before the move')`);
      await c.query(`DO $$ DECLARE r record; BEGIN
        FOR r IN SELECT oid::regclass AS rel FROM pg_class WHERE relnamespace = '"${s}"'::regnamespace AND relkind = 'r' LOOP
          EXECUTE format('ALTER TABLE %s OWNER TO app', r.rel);
        END LOOP;
        ALTER SCHEMA "${s}" OWNER TO app;
      END $$`);
    }
  });

  await moveShard(config, single, 'b');
  await moveShards(config, [inSet], 'b');

  for (const shard of [single, inSet]) {
    const s = shardSchema(config, shard);
    const q = (name: string) => `"${s}".${name}`;
    assert.ok(await withClient(aUrl, (c) => isSealed(c, s)), `shard ${shard}'s old copy is sealed`);
    const rowsBefore = await countRows(aUrl, s);
    const tries: [string, string, string][] = [
      // [what, SQL, SQLSTATE expected]
      ['a stale write (insert)', `INSERT INTO ${q('items')} (note) VALUES ('lost')`, 'SF001'],
      ['a stale write (update)', `UPDATE ${q('items')} SET note = 'lost'`, 'SF001'],
      ['a stale write (delete)', `DELETE FROM ${q('items')}`, 'SF001'],
      [
        'a stale tool with search_path',
        `SET search_path = "${s}"; INSERT INTO items (note) VALUES ('lost')`,
        'SF001',
      ],
      ['truncate', `TRUNCATE ${q('items')}`, '42501'],
      ['replica mode', `SET session_replication_role = replica`, '42501'],
      ['disable the fence', `ALTER TABLE ${q('items')} DISABLE TRIGGER _shardflake_fence`, '42501'],
      ['disable all triggers', `ALTER TABLE ${q('items')} DISABLE TRIGGER ALL`, '42501'],
      [
        'fence to replica-only',
        `ALTER TABLE ${q('items')} ENABLE REPLICA TRIGGER _shardflake_fence`,
        '42501',
      ],
      ['drop the fence trigger', `DROP TRIGGER _shardflake_fence ON ${q('items')}`, '42501'],
      ['drop the fence function', `DROP FUNCTION ${q('_shardflake_fence')}() CASCADE`, '42501'],
      [
        'replace the fence function',
        `CREATE OR REPLACE FUNCTION ${q('_shardflake_fence')}() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RETURN NULL; END $f$`,
        '42501',
      ],
      ['rename the table away', `ALTER TABLE ${q('items')} RENAME TO items_old`, '42501'],
      ['take the table back', `ALTER TABLE ${q('items')} OWNER TO app`, '42501'],
      ['become the owner role', `SET ROLE ${FENCED_ROLE}`, '42501'],
      ['plant a table', `CREATE TABLE ${q('planted')} (x int)`, '42501'],
      ['drop the schema', `DROP SCHEMA "${s}" CASCADE`, '42501'],
    ];
    for (const [what, sql, expected] of tries) {
      assert.equal(await attempt(appUrl, sql), expected, `shard ${shard}, former owner: ${what}`);
    }
    // A superuser's loader in replica mode (what pg_restore, logical-replication tools and bulk loaders set).
    assert.equal(
      await attempt(
        aUrl,
        `SET session_replication_role = replica; INSERT INTO ${q('items')} (note) VALUES ('lost')`,
      ),
      'SF001',
      `shard ${shard}: a superuser's replica-mode insert`,
    );
    // A superuser's tools that would undo the seal without meaning to (pg_restore --disable-triggers, a script
    // dropping stray triggers, an admin handing the tables back): refused by the seal's event triggers, which
    // fire in replica mode too.
    const superTries: [string, string][] = [
      ['pg_restore --disable-triggers', `ALTER TABLE ${q('items')} DISABLE TRIGGER ALL`],
      [
        'disable the fence in replica mode',
        `SET session_replication_role = replica; ALTER TABLE ${q('items')} DISABLE TRIGGER _shardflake_fence`,
      ],
      ['fence to replica-only', `ALTER TABLE ${q('items')} ENABLE REPLICA TRIGGER _shardflake_fence`],
      ['drop the fence trigger', `DROP TRIGGER _shardflake_fence ON ${q('items')}`],
      ['drop the fence function', `DROP FUNCTION ${q('_shardflake_fence')}() CASCADE`],
      ['hand the table back', `ALTER TABLE ${q('items')} OWNER TO app`],
      ['drop one table', `DROP TABLE ${q('items')}`],
    ];
    for (const [what, sql] of superTries) {
      assert.equal(await attempt(aUrl, sql), '42501', `shard ${shard}, superuser: ${what}`);
    }
    // Any role may SET the move's switch; it opens nothing for a role that did not install the guard.
    assert.equal(
      await attempt(appUrl, `SET shardflake.move_ddl = 'on'; ALTER TABLE ${q('items')} DISABLE TRIGGER ALL`),
      '42501',
    );
    assert.ok(await withClient(aUrl, (c) => isSealed(c, s)), `shard ${shard}'s old copy is still sealed`);
    assert.equal(await countRows(aUrl, s), rowsBefore, `shard ${shard}: no row changed on the old copy`);
    // A stale read still sees the rows as of the cutover.
    assert.equal(await attempt(appUrl, `SELECT count(*) FROM ${q('items')}`), 'ok');
  }

  // A fence role someone made able to lift fences (a member) is refused at the next seal, in one sentence.
  await withClient(aUrl, (c) => c.query(`GRANT ${FENCED_ROLE} TO app`));
  await assert.rejects(
    moveShard(config, third, 'b'),
    (e) => isShardflakeError(e) && /could lift the fence/.test(e.message),
  );
  await withClient(aUrl, (c) => c.query(`REVOKE ${FENCED_ROLE} FROM app`));

  // Cleanup (a superuser) finishes the interrupted move, seals its copy, and drops every old copy.
  const result = await cleanupCluster(config);
  assert.deepEqual(result.skipped, []);
  assert.deepEqual(
    await withClient(
      aUrl,
      async (c) =>
        (await c.query("SELECT evtname FROM pg_event_trigger WHERE evtname LIKE 'shardflake%'")).rows,
    ),
    [],
    'with the last sealed copy gone, its guard is gone too',
  );
  for (const shard of [single, inSet, third]) {
    assert.equal(
      await schemaOn(aUrl, shardSchema(config, shard)),
      false,
      `shard ${shard}'s old copy dropped`,
    );
    assert.equal(await schemaOn(config.servers.b as string, shardSchema(config, shard)), true);
  }
});
