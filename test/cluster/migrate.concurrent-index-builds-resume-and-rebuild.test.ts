import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import type { IndexBuildEvent } from '../../packages/shardflake/src/admin/migrate-concurrently.js';
import { clusterStatus } from '../../packages/shardflake/src/admin/status.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

// 8 shards: 0-3 on server a, 4-7 on server b (init places contiguous blocks).
const servers = await useServers(2);
const urlOf = (name: string) => servers.find((s) => s.name === name)?.url ?? '';
const schemaOf = (shard: number) => `shard_${String(shard).padStart(4, '0')}`;
const serverOf = (shard: number) => (shard < 4 ? 'a' : 'b');

const likes = {
  version: 1,
  name: 'likes',
  sql: 'ALTER TABLE photos ADD COLUMN likes integer NOT NULL DEFAULT 0',
};
const likesIndex = {
  version: 2,
  name: 'likes index',
  sql: 'CREATE INDEX CONCURRENTLY photos_likes ON photos (likes)',
};
const tags = { version: 3, name: 'tags', sql: 'ALTER TABLE photos ADD COLUMN tags text' };
const tagsIndex = {
  version: 4,
  name: 'tags index',
  sql: 'CREATE INDEX CONCURRENTLY photos_tags ON photos (tags)',
};
const dropTags = { version: 5, name: 'no tags index', sql: 'DROP INDEX CONCURRENTLY photos_tags' };
const uniqueUser = {
  version: 6,
  name: 'one photo per user',
  sql: 'CREATE UNIQUE INDEX CONCURRENTLY photos_one_per_user ON photos (user_id)',
};
const config = (...migrations: object[]) => testConfig(servers, { logicalShards: 8, migrations });

async function onShard<T>(shard: number, work: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = await connect(urlOf(serverOf(shard)));
  try {
    await client.query(`SET search_path TO ${schemaOf(shard)}`);
    return await work(client);
  } finally {
    await client.end();
  }
}

/** The shard's index of that name: its definition and whether it is valid; null when there is none. */
const indexOf = (shard: number, index: string) =>
  onShard(shard, async (c) => {
    const { rows } = await c.query(
      `SELECT pg_get_indexdef(i.indexrelid) AS def, i.indisvalid AS valid FROM pg_index i
       JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relname = $2`,
      [schemaOf(shard), index],
    );
    return (rows[0] as { def: string; valid: boolean } | undefined) ?? null;
  });

const versionOf = (shard: number) =>
  onShard(shard, async (c) => {
    const { rows } = await c.query('SELECT max(version) AS v FROM _shardflake_migrations');
    return (rows[0] as { v: number }).v;
  });

const shards = [0, 1, 2, 3, 4, 5, 6, 7];

describe('cluster migrate with CREATE/DROP INDEX CONCURRENTLY', () => {
  it('builds on every shard outside a transaction, one build at a time per server, servers in parallel, in order with the transactional migrations', async () => {
    await initCluster(config(likes));
    await Promise.all(
      shards.map((s) =>
        onShard(s, (c) => c.query('INSERT INTO photos (user_id) SELECT g FROM generate_series(1, 50) g')),
      ),
    );
    // The race to provoke: server a's first build waits on a writer that holds shard 0's table open, and server b's
    // four builds must all finish meanwhile (servers in parallel) while server a starts no other build (one per
    // server). The writer commits only once b is done, so this cannot pass by timing luck.
    const writer = await connect(urlOf('a'));
    await writer.query(`BEGIN; INSERT INTO ${schemaOf(0)}.photos (user_id) VALUES (0)`);
    const events: IndexBuildEvent[] = [];
    let released = false;
    let aStartedWhileHeld: number[] = [];
    // The writer is let go in every case (also when the test fails), else the held build would wait forever.
    const release = () => {
      if (released) return;
      released = true;
      void writer.query('COMMIT').then(() => writer.end());
    };
    const safety = setTimeout(release, 60_000);
    let result: Awaited<ReturnType<typeof migrateCluster>>;
    let bFinishedWhileHeld = false;
    try {
      result = await migrateCluster(config(likes, likesIndex, tags), {
        connectionsPerServer: 2,
        onIndexBuild: (event) => {
          events.push(event);
          const bDone = events.filter((e) => e.server === 'b' && e.phase === 'finished').length;
          if (bDone === 4 && !released) {
            bFinishedWhileHeld = true;
            // Which of a's builds had started by then: exactly one (one build per server), still waiting.
            aStartedWhileHeld = events
              .filter((e) => e.server === 'a' && e.phase === 'started')
              .map((e) => e.shard)
              .filter(
                (shard) =>
                  !events.some(
                    (e) =>
                      e.server === 'a' &&
                      e.shard === shard &&
                      (e.phase === 'finished' || e.phase === 'failed'),
                  ),
              );
            release();
          }
        },
      });
    } finally {
      clearTimeout(safety);
      release();
    }
    assert.ok(bFinishedWhileHeld, 'server b finished its builds while server a was held');
    // One build of a's is running, held: a CONCURRENTLY build waits for every older transaction on its server, so
    // whichever of a's two workers took the build slot first (shard 0's or another's, a race) waits on the writer;
    // the other worker's build must not start beside it.
    assert.equal(aStartedWhileHeld.length, 1, `server a ran builds of shards ${aStartedWhileHeld} at once`);
    assert.deepEqual(result.failed, []);
    assert.equal(result.migrated, 8);
    // Never two builds on one server at once.
    for (const server of ['a', 'b']) {
      let running = 0;
      for (const e of events.filter((x) => x.server === server)) {
        running += e.phase === 'started' ? 1 : e.phase === 'finished' || e.phase === 'failed' ? -1 : 0;
        assert.ok(running <= 1, `two builds at once on server ${server}`);
      }
    }
    for (const s of shards) {
      assert.equal(await versionOf(s), 3);
      const index = await indexOf(s, 'photos_likes');
      assert.equal(index?.valid, true, `shard ${s}`);
      assert.match(index?.def ?? '', /\(likes\)/);
    }
    assert.deepEqual((await clusterStatus(config(likes, likesIndex, tags))).schemaVersions, { 3: 8 });
  });

  it('after a run that died between build and version row, or mid-build: a valid index counts as built, an invalid one is dropped and built again', async () => {
    // Shard 1: the build of v4 finished but the run died before recording it (a valid photos_tags).
    await onShard(1, (c) => c.query('CREATE INDEX CONCURRENTLY photos_tags ON photos (tags)'));
    // Shard 6: a build under that name failed and left an invalid index (on another column, to tell them apart).
    await onShard(6, async (c) => {
      await c.query('INSERT INTO photos (user_id) VALUES (1)');
      await assert.rejects(c.query('CREATE UNIQUE INDEX CONCURRENTLY photos_tags ON photos (user_id)'), {
        code: '23505',
      });
    });
    assert.equal((await indexOf(6, 'photos_tags'))?.valid, false);

    // With parallelBuilds 1, server b's builds must wait while shard 0's build (server a) is held by a writer for
    // 300 ms; were the limit ignored, they would run inside that window and overlap it.
    const writer = await connect(urlOf('a'));
    await writer.query(`BEGIN; INSERT INTO ${schemaOf(0)}.photos (user_id) VALUES (1000)`);
    const events: IndexBuildEvent[] = [];
    const result = await migrateCluster(config(likes, likesIndex, tags, tagsIndex), {
      parallelBuilds: 1,
      onIndexBuild: (e) => {
        events.push(e);
        if (e.shard === 0 && e.phase === 'started') {
          setTimeout(() => void writer.query('COMMIT').then(() => writer.end()), 300);
        }
      },
    });
    // --parallel-builds 1: never two builds at once, on any server.
    let running = 0;
    for (const e of events) {
      running += e.phase === 'started' ? 1 : e.phase === 'finished' || e.phase === 'failed' ? -1 : 0;
      assert.ok(running <= 1, 'two builds at once with parallelBuilds 1');
    }
    assert.equal(events.filter((e) => e.phase === 'finished').length, 7);
    assert.deepEqual(result.failed, []);
    assert.deepEqual(result.rebuiltIndexes, [
      {
        shard: 6,
        server: 'b',
        schema: 'shard_0006',
        index: 'photos_tags',
        action: 'create',
        phase: 'finished',
        rebuilt: true,
      },
    ]);
    assert.deepEqual(
      events.filter((e) => e.phase === 'skipped').map((e) => e.shard),
      [1],
    );
    for (const s of shards) {
      assert.equal(await versionOf(s), 4);
      const index = await indexOf(s, 'photos_tags');
      assert.equal(index?.valid, true);
      assert.match(index?.def ?? '', /\(tags\)/, `shard ${s}: the invalid index on user_id was replaced`);
    }

    // DROP INDEX CONCURRENTLY: shard 3's was already dropped by a run that died before recording v5.
    await onShard(3, (c) => c.query('DROP INDEX CONCURRENTLY photos_tags'));
    const dropped = await migrateCluster(config(likes, likesIndex, tags, tagsIndex, dropTags));
    assert.deepEqual(dropped.failed, []);
    for (const s of shards) {
      assert.equal(await versionOf(s), 5);
      assert.equal(await indexOf(s, 'photos_tags'), null);
    }
  });

  it('a build that fails leaves its shard at the version before, removes its invalid index, and the other shards go on', async () => {
    // Shard 6 already has two photos of user 1 (above); a unique index on user_id cannot be built there.
    const all = config(likes, likesIndex, tags, tagsIndex, dropTags, uniqueUser);
    const result = await migrateCluster(all);
    assert.deepEqual(
      result.failed.map((f) => [f.shard, f.version, f.sqlState]),
      [[6, 5, '23505']],
    );
    assert.match(result.failed[0]?.error ?? '', /photos_one_per_user|duplicate/);
    assert.equal(await indexOf(6, 'photos_one_per_user'), null, 'the invalid leftover is dropped at once');
    assert.equal(await versionOf(6), 5);
    for (const s of shards.filter((x) => x !== 6))
      assert.equal((await indexOf(s, 'photos_one_per_user'))?.valid, true);
    const status = await clusterStatus(all);
    assert.deepEqual(status.schemaVersions, { 5: 1, 6: 7 });
    assert.match(status.shards[6]?.lastError ?? '', /could not create unique index/);
  });

  it('buildShare paces each server: after a build of t ms its next build starts no sooner than t · (1 / share − 1) later', async () => {
    const userLikes = {
      version: 7,
      name: 'photos by user and likes',
      sql: 'CREATE INDEX CONCURRENTLY photos_user_likes ON photos (user_id, likes)',
    };
    const all = config(likes, likesIndex, tags, tagsIndex, dropTags, uniqueUser, userLikes);
    await assert.rejects(
      migrateCluster(all, { buildShare: 0 }),
      (e: Error & { code?: string }) =>
        e.code === 'INVALID_ARGUMENT' && /^buildShare must be a number above 0 and at most 1/.test(e.message),
    );
    const events: (IndexBuildEvent & { at: number })[] = [];
    const share = 0.2;
    await migrateCluster(all, {
      buildShare: share,
      onIndexBuild: (e) => events.push({ ...e, at: performance.now() }),
    });
    let checked = 0;
    for (const server of ['a', 'b']) {
      const list = events.filter((e) => e.server === server && e.phase !== 'skipped');
      for (let i = 0; i + 2 < list.length; i += 2) {
        type Event = (typeof list)[number];
        const [start, end, next] = [list[i] as Event, list[i + 1] as Event, list[i + 2] as Event];
        assert.equal(start.phase, 'started');
        assert.notEqual(end.phase, 'started', 'one build at a time per server');
        const rest = (end.at - start.at) * (1 / share - 1);
        // 2 ms for the timer's own precision.
        assert.ok(
          next.at - end.at >= rest - 2,
          `server ${server}: a build of ${(end.at - start.at).toFixed(1)} ms, then the next after ${(next.at - end.at).toFixed(1)} ms (rest ${rest.toFixed(1)})`,
        );
        checked++;
      }
    }
    assert.ok(checked >= 4, `builds checked: ${checked}`);
    for (const s of shards.filter((x) => x !== 6))
      assert.equal((await indexOf(s, 'photos_user_likes'))?.valid, true);
  });

  it('a new cluster is created directly at the latest version, its CONCURRENTLY builds made plainly in the creation transaction', async () => {
    const fresh = {
      ...testConfig(servers, { logicalShards: 2, schemaPrefix: 'fresh_', migrations: [likes, likesIndex] }),
      catalog: 'b',
    };
    assert.equal((await initCluster(fresh)).created, 2);
    const client = await connect(urlOf('a'));
    const { rows } = await client.query(
      `SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'fresh_0000' AND c.relname = 'photos_likes'`,
    );
    await client.end();
    assert.deepEqual(rows, [{ valid: true }]);
    assert.deepEqual((await clusterStatus(fresh)).schemaVersions, { 2: 2 });
  });
});
