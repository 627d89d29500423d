import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { createRouter, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { verifyLookups } from '../../packages/shardflake/src/lookups/verify.js';
import { shardForKey } from '../../packages/shardflake/src/routing/shard-key.js';
import { closeAll, connectAll } from '../../packages/shardflake/src/topology/connections.js';
import { startCli } from '../support/cli.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';

/**
 * Damage made by hand around the capture triggers (session_replication_role = replica turns them off, as a
 * careless restore would): `verifyLookups` reports each kind both ways, without printing values; repair fixes what
 * it can and says what it could not (a unique value held by two rows) — in the library and in `cluster verify`.
 */
const servers = await useServers(1);
const raw = {
  servers: { [defined(servers[0]).name]: defined(servers[0]).url },
  catalog: defined(servers[0]).name,
  logicalShards: 4,
  tables: {
    users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text)',
  },
  lookups: { user_email: { table: 'users', column: 'email', unique: true } },
};
const config = validateConfig(raw, 'test-config');
const configFile = join(mkdtempSync(join(tmpdir(), 'sf-verify-')), 'cluster.json');
writeFileSync(configFile, JSON.stringify(raw));
let router: Router;
let clients: Map<string, pg.Client>;
let admin: pg.Client;

before(async () => {
  await initCluster(config);
  router = await createRouter(config);
  clients = await connectAll(config);
  admin = defined(clients.get(defined(servers[0]).name));
});
after(async () => {
  await router?.close();
  if (clients) await closeAll(clients);
});

const users = (shard: number) => `"${shardSchema(config, shard)}".users`;
const entries = (value: string) =>
  `"${shardSchema(config, shardForKey(value, 4))}"._shardflake_lookup_user_email`;

describe('cluster verify: lookups', () => {
  it('finds owner without entry, entry without owner, value mismatch and misplaced entries; repair fixes them', async () => {
    const kept = await router.insert('users', { name: 'kept', email: 'kept@x' }, { key: 0 });
    const changed = await router.insert('users', { name: 'changed', email: 'before@x' }, { key: 1 });
    const orphan = await router.insert('users', { name: 'orphan', email: 'orphan@x' }, { key: 2 });
    const taken = await router.insert('users', { name: 'taken', email: 'dup@x' }, { key: 3 });
    assert.deepEqual(await verifyLookups(config, clients), [], 'a kept lookup is clean');

    await admin.query('SET session_replication_role = replica');
    const { rows } = await admin.query(
      `INSERT INTO ${users(0)} (name, email) VALUES ('no entry', 'noentry@x'), ('dup', 'dup@x') RETURNING id`,
    );
    const [noEntry, dup] = rows.map((r: { id: string }) => BigInt(r.id));
    await admin.query(`UPDATE ${users(1)} SET email = 'after@x' WHERE id = $1`, [changed]);
    await admin.query(`DELETE FROM ${users(2)} WHERE id = $1`, [orphan]);
    const wrongShard = `"${shardSchema(config, (shardForKey('kept@x', 4) + 1) % 4)}"._shardflake_lookup_user_email`;
    await admin.query(`INSERT INTO ${wrongShard} (value, id) VALUES ('kept@x', $1)`, [kept]);
    await admin.query('SET session_replication_role = DEFAULT');

    const found = await verifyLookups(config, clients);
    const summary = found.map((p) => `${p.kind} ${p.id}`).sort();
    assert.deepEqual(
      summary,
      [
        `entry-without-owner ${orphan}`,
        `misplaced-entry ${kept}`,
        `owner-without-entry ${changed}`,
        `owner-without-entry ${dup}`,
        `owner-without-entry ${noEntry}`,
        `value-mismatch ${changed}`,
      ].sort(),
    );
    assert.doesNotMatch(
      JSON.stringify(found, (_k, v) => (typeof v === 'bigint' ? String(v) : v)),
      /@x/,
    );

    // The command: verify fails and names the problems; --repair fixes what it can and says what it could not.
    const verify = await startCli(['cluster', 'verify', '--config', configFile]).done;
    assert.equal(verify.code, 1, verify.stderr);
    assert.match(verify.stdout, /FAIL {2}lookups/);
    assert.match(verify.stdout, new RegExp(`row ${orphan}`));
    assert.doesNotMatch(verify.stdout + verify.stderr, /@x/);
    const repair = await startCli(['cluster', 'verify', '--config', configFile, '--repair']).done;
    assert.equal(repair.code, 1, 'the duplicate is still there');
    assert.equal((repair.stdout.match(/^repaired /gm) ?? []).length, 5, repair.stdout);
    assert.match(repair.stdout, new RegExp(`NOT repaired .*row ${dup}.*row ${taken} holds the same value`));
    const left = await verifyLookups(config, clients);
    assert.deepEqual(
      left.map((p) => `${p.kind} ${p.id}`),
      [`owner-without-entry ${dup}`],
      'only the duplicate is left',
    );
    assert.deepEqual(await router.lookup('user_email', 'after@x'), { id: changed, shard: 1 });
    assert.deepEqual(await router.lookup('user_email', 'noentry@x'), { id: noEntry, shard: 0 });
    assert.equal(await router.lookup('user_email', 'orphan@x'), null);
    const stale = await admin.query(
      `SELECT count(*)::int AS n FROM ${entries('before@x')} WHERE value = 'before@x'`,
    );
    assert.equal(stale.rows[0].n, 0);
  });
});
