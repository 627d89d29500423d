import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { asId, isShardflakeError, type ShardflakeId } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { bumpMapVersion } from '../../packages/shardflake/src/catalog/shards.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { createRouter, type Router } from '../../packages/shardflake/src/router/router.js';
import type { WriteRetry } from '../../packages/shardflake/src/routing/context.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

const servers = await useServers(2);

/**
 * Fences a shard's current copy the way a move does (every INSERT raises SF001) and returns connections to the
 * catalog and to the copy's server, for the test to lift the fence or bump the map.
 */
async function fenceShard(shard: number) {
  const catalog = await connect(defined(servers[0]).url);
  const { rows } = await catalog.query('SELECT server, schema_name FROM shardflake.shards WHERE shard = $1', [
    shard,
  ]);
  const { server, schema_name: schema } = rows[0] as { server: string; schema_name: string };
  const owner = await connect(defined(servers.find((s) => s.name === server)).url);
  await owner.query(`CREATE FUNCTION "${schema}".fenced() RETURNS trigger LANGUAGE plpgsql AS
    $$ BEGIN RAISE EXCEPTION 'shard moved' USING ERRCODE = 'SF001'; END $$`);
  await owner.query(
    `CREATE TRIGGER fence BEFORE INSERT ON "${schema}".photos FOR EACH ROW EXECUTE FUNCTION "${schema}".fenced()`,
  );
  return { catalog, owner, schema };
}
const config = testConfig(servers, { logicalShards: 16 });
let router: Router;

before(async () => {
  await initCluster(config);
  router = await createRouter(config);
});
after(async () => {
  await router?.close();
});

async function until(check: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('router', () => {
  it('inserts by shard key and gets, updates and deletes by id, taking the shard from the id', async () => {
    const id = await router.insert('photos', { user_id: 5001n, caption: 'hello' }, { key: 5001n });
    assert.equal(typeof id, 'bigint');
    assert.equal(router.shardOfId(id), 5001 % 16);
    assert.equal(router.shardFor(5001n), 5001 % 16);
    const row = await router.get('photos', id);
    assert.deepEqual(row, { id, user_id: 5001n, caption: 'hello' });
    assert.equal(await router.update('photos', id, { caption: 'edited' }), true);
    assert.equal((await router.get('photos', id))?.caption, 'edited');
    assert.equal(await router.delete('photos', id), true);
    assert.equal(await router.get('photos', id), null);
    assert.equal(await router.delete('photos', id), false);
  });

  it('puts string keys on their hashed shard', async () => {
    const id = await router.insert(
      'photos',
      { user_id: 1, caption: 'by email' },
      { key: 'alice@example.com' },
    );
    assert.equal(router.shardOfId(id), router.shardFor('alice@example.com'));
  });

  it('merges a feed over many shards in id order with keyset pagination', async () => {
    const users = Array.from({ length: 40 }, (_, i) => BigInt(1000 + i));
    const inserted: bigint[] = [];
    for (let round = 0; round < 3; round++) {
      for (const user of users)
        inserted.push(await router.insert('photos', { user_id: user, caption: `p${round}` }, { key: user }));
    }
    // Some other users' photos that must not appear.
    for (let i = 0; i < 10; i++) await router.insert('photos', { user_id: 99_000 + i }, { key: 99_000 + i });

    const seen: ShardflakeId[] = [];
    let before: ShardflakeId | undefined;
    for (let page = 0; page < 10; page++) {
      const result = await router.feed('photos', { column: 'user_id', keys: users, limit: 25, before });
      for (const row of result.rows) assert.ok(users.includes(row.user_id as bigint));
      seen.push(...result.rows.map((r) => r.id as ShardflakeId));
      if (result.next === null) break;
      before = result.next;
    }
    const expected = [...inserted].sort((a, b) => (a > b ? -1 : a < b ? 1 : 0));
    assert.deepEqual(seen, expected);
    assert.ok(new Set(seen.map((id) => router.shardOfId(id))).size > 8, 'the feed spans many shards');
  });

  it('reads whole shards when no keys are given', async () => {
    const page = await router.feed('photos', { shards: [3], limit: 1000 });
    assert.ok(page.rows.length > 0);
    for (const row of page.rows) assert.equal(router.shardOfId(row.id as ShardflakeId), 3);
  });

  it('refuses ids of shards outside the cluster and bad names', async () => {
    const foreign = asId(99n << BigInt(defined(config.layout.field('shard')).shift));
    await assert.rejects(router.get('photos', foreign), (e: unknown) => isShardflakeError(e, 'INVALID_ID'));
    await assert.rejects(router.insert('photos"; --', { user_id: 1 }, { key: 1 }), (e: unknown) =>
      isShardflakeError(e, 'INVALID_IDENTIFIER'),
    );
  });

  it('hears of map changes by LISTEN/NOTIFY and routes by the new map before acting', async () => {
    const before = router.mapVersion;
    const catalog = await connect(defined(servers[0]).url);
    // Point shard 2 at a copy on the other server (what a move's cutover does), then announce it.
    const { rows } = await catalog.query('SELECT server, schema_name FROM shardflake.shards WHERE shard = 2');
    const { server, schema_name: schema } = rows[0] as { server: string; schema_name: string };
    const other = server === 'a' ? 'b' : 'a';
    const target = await connect(defined(servers.find((s) => s.name === other)).url);
    const source = await connect(defined(servers.find((s) => s.name === server)).url);
    await target.query(
      `CREATE SCHEMA "${schema}"; CREATE TABLE "${schema}".photos (id bigint PRIMARY KEY, user_id bigint, caption text)`,
    );
    await target.query(`INSERT INTO "${schema}".photos VALUES (42, 2, 'copy')`);
    await catalog.query('BEGIN');
    await catalog.query('UPDATE shardflake.shards SET server = $1 WHERE shard = 2', [other]);
    await bumpMapVersion(catalog);
    await catalog.query('COMMIT');
    await until(() => router.mapVersion > before);
    assert.equal(router.placement(2).server, other);
    const id = asId(42n | (2n << BigInt(defined(config.layout.field('shard')).shift)));
    await target.query(`UPDATE "${schema}".photos SET id = $1`, [id]);
    assert.equal((await router.get('photos', id))?.caption, 'copy');
    // Put it back so the other tests' data stays reachable.
    await catalog.query('BEGIN');
    await catalog.query('UPDATE shardflake.shards SET server = $1 WHERE shard = 2', [server]);
    await bumpMapVersion(catalog);
    await catalog.query('COMMIT');
    await target.query(`DROP SCHEMA "${schema}" CASCADE`);
    await Promise.all([catalog.end(), target.end(), source.end()]);
    await until(() => router.placement(2).server === server);
  });

  it('retries a write that hits a fenced copy (SF001) until the map moves it, then succeeds', async () => {
    const { catalog, owner, schema } = await fenceShard(7);
    setTimeout(async () => {
      // The "cutover": the fence comes off (as if the shard now lived elsewhere) and the map is bumped.
      await owner.query(`DROP TRIGGER fence ON "${schema}".photos`);
      await catalog.query('BEGIN');
      await bumpMapVersion(catalog);
      await catalog.query('COMMIT');
    }, 300);
    const id = await router.insert('photos', { user_id: 7 }, { key: 7 });
    assert.equal(router.shardOfId(id), 7);
    await Promise.all([catalog.end(), owner.end()]);
  });

  it('wakes a retrying write with the NOTIFY of the new map, not at the end of its backoff', {
    timeout: 60_000,
  }, async () => {
    // Backoff far longer than the test's timeout: the write can only finish in time if the map change wakes it.
    const retries: WriteRetry[] = [];
    const waiting = await createRouter(config, {
      retryBackoffMs: 120_000,
      maxRetryBackoffMs: 120_000,
      writeRetryMs: 240_000,
      onRetry: (r) => retries.push(r),
    });
    const catalog = await connect(defined(servers[0]).url);
    const { rows } = await catalog.query(
      'SELECT server, schema_name FROM shardflake.shards WHERE shard = 11',
    );
    const { server, schema_name: schema } = rows[0] as { server: string; schema_name: string };
    const owner = await connect(defined(servers.find((s) => s.name === server)).url);
    // The fence counts its hits in a sequence (not rolled back with the write), so the test knows when to cut over.
    await owner.query(`CREATE SEQUENCE "${schema}".hits`);
    await owner.query(`CREATE FUNCTION "${schema}".fenced() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN PERFORM nextval('"${schema}".hits'); RAISE EXCEPTION 'shard moved' USING ERRCODE = 'SF001'; END $$`);
    await owner.query(
      `CREATE TRIGGER fence BEFORE INSERT ON "${schema}".photos FOR EACH ROW EXECUTE FUNCTION "${schema}".fenced()`,
    );
    const write = waiting.insert('photos', { user_id: 11 }, { key: 11 });
    const hits = async () =>
      Number((await owner.query(`SELECT last_value, is_called FROM "${schema}".hits`)).rows[0].is_called);
    while ((await hits()) === 0) await new Promise((r) => setTimeout(r, 10));
    await owner.query(`DROP TRIGGER fence ON "${schema}".photos`);
    await catalog.query('BEGIN');
    await bumpMapVersion(catalog);
    await catalog.query('COMMIT');
    const id = await write;
    assert.equal(waiting.shardOfId(id), 11);
    assert.deepEqual(retries, [{ shard: 11, attempt: 1, reason: 'fenced', woke: 'map' }]);
    await Promise.all([catalog.end(), owner.end(), waiting.close()]);
  });

  it('gives up on a fenced shard after the bounded retry time with SHARD_FENCED', async () => {
    const short = await createRouter(config, { writeRetryMs: 200 });
    const { catalog, owner, schema } = await fenceShard(8);
    await assert.rejects(short.insert('photos', { user_id: 8 }, { key: 8 }), (e: unknown) =>
      isShardflakeError(e, 'SHARD_FENCED'),
    );
    await owner.query(`DROP TRIGGER fence ON "${schema}".photos`);
    await Promise.all([catalog.end(), owner.end(), short.close()]);
  });

  it('a read or session that finds the schema moved away under an old map re-reads the map and runs on the new home', async () => {
    // A router that cannot hear NOTIFY keeps the old map until an operation finds the schema gone.
    const deaf = await createRouter(config, { listen: false });
    const catalog = await connect(servers[0]?.url as string);
    const { rows } = await catalog.query('SELECT server, schema_name FROM shardflake.shards WHERE shard = 4');
    const { server, schema_name: schema } = rows[0] as { server: string; schema_name: string };
    const other = server === 'a' ? 'b' : 'a';
    const source = await connect(servers.find((s) => s.name === server)?.url as string);
    const target = await connect(servers.find((s) => s.name === other)?.url as string);
    const id = asId(77n | (4n << BigInt(config.layout.field('shard')?.shift ?? 0)));
    await target.query(
      `CREATE SCHEMA "${schema}"; CREATE TABLE "${schema}".photos (id bigint PRIMARY KEY, user_id bigint, caption text)`,
    );
    await target.query(`INSERT INTO "${schema}".photos VALUES ($1, 4, 'on the new home')`, [id]);
    await catalog.query('BEGIN');
    await catalog.query('UPDATE shardflake.shards SET server = $1 WHERE shard = 4', [other]);
    await bumpMapVersion(catalog);
    await catalog.query('COMMIT');
    await source.query(`ALTER SCHEMA "${schema}" RENAME TO "${schema}_gone"`);
    assert.equal(deaf.placement(4).server, server, 'the deaf router still has the old map');
    assert.equal((await deaf.get('photos', id))?.caption, 'on the new home');
    assert.equal(deaf.placement(4).server, other);
    // Put it back for the other tests.
    await catalog.query('BEGIN');
    await catalog.query('UPDATE shardflake.shards SET server = $1 WHERE shard = 4', [server]);
    await bumpMapVersion(catalog);
    await catalog.query('COMMIT');
    await source.query(`ALTER SCHEMA "${schema}_gone" RENAME TO "${schema}"`);
    await deaf.refresh();
    // The same for a session, this time moving the other way round.
    await catalog.query('BEGIN');
    await catalog.query('UPDATE shardflake.shards SET server = $1 WHERE shard = 4', [other]);
    await bumpMapVersion(catalog);
    await catalog.query('COMMIT');
    await source.query(`ALTER SCHEMA "${schema}" RENAME TO "${schema}_gone"`);
    const seen = await deaf.withShard({ shard: 4 }, async (s) => {
      const { rows: found } = await s.query('SELECT caption FROM photos WHERE id = $1', [id]);
      return { server: s.server, caption: found[0]?.caption };
    });
    assert.deepEqual(seen, { server: other, caption: 'on the new home' });
    await catalog.query('BEGIN');
    await catalog.query('UPDATE shardflake.shards SET server = $1 WHERE shard = 4', [server]);
    await bumpMapVersion(catalog);
    await catalog.query('COMMIT');
    await source.query(`ALTER SCHEMA "${schema}_gone" RENAME TO "${schema}"`);
    await target.query(`DROP SCHEMA "${schema}" CASCADE`);
    await Promise.all([catalog.end(), source.end(), target.end(), deaf.close()]);
    await until(() => router.placement(4).server === server);
  });
});
