import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type { Row } from 'shardflake';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { cleanupCluster } from '../../packages/shardflake/src/move/cleanup.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { type SqlFixture, sqlFixture } from './fixture.js';

/**
 * router.sqlStream retries a shard that moved between its plan and its read, as router.sql does, and gives each
 * row once. The race is provoked, not hoped for: on the server whose shards come second in the stream, the first
 * of its shards' tables is locked by the test, so the stream (its map already read) waits while parsing its
 * statement there, before reaching a later shard of that server. That later shard is then moved to the other server
 * and its old copy dropped (`cluster cleanup`); the lock is let go, the stream's statement meets the dropped
 * schema (42P01), and the stream opens again on the new map. The stream is retried only before its first row
 * (sql/index.ts, openStreams): the unordered case would repeat the first server's rows if it restarted after
 * giving them out.
 */
const f: SqlFixture = await sqlFixture();
after(async () => {
  await f?.router.close();
  await f?.plain.end();
});

const show = (rows: Row[]) =>
  rows.map((r) => JSON.stringify(r, (_, v) => (typeof v === 'bigint' ? `${v}` : v)));

/** Runs the stream of `text` (reading `table`) while one of its shards moves away under it; returns its rows. */
async function streamRacingAMove(text: string, table: string): Promise<Row[]> {
  const shards = Array.from({ length: f.router.logicalShards }, (_, s) => s);
  const first = f.router.placement(0).server;
  // The server whose statement the stream runs second, its first shard (locked) and its last (moved).
  const second = defined(shards.map((s) => f.router.placement(s).server).find((s) => s !== first));
  const on = shards.filter((s) => f.router.placement(s).server === second);
  const [locked, moving] = [defined(on[0]), defined(on[on.length - 1])];
  assert.notEqual(locked, moving);
  const url = String((f.configFile.servers as Record<string, string>)[second]);
  // The move is held once its copy is in sync, before its cutover: its replication slot is made (which waits for
  // every transaction holding an xid, as the lock below does) and only the cutover, the switch and its end remain.
  let held!: () => void;
  const isHeld = new Promise<void>((resolve) => {
    held = resolve;
  });
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  const moved = moveShard(f.config, moving, first, {
    afterStep: async (step) => {
      if (step !== 'synced') return;
      held();
      await released;
    },
  });
  moved.catch(() => {});
  await isHeld;
  const blocker = await connect(url);
  const rows: Row[] = [];
  let reading: Promise<void> | undefined;
  try {
    await blocker.query('BEGIN');
    await blocker.query(`LOCK TABLE "${shardSchema(f.config, locked)}".${table} IN ACCESS EXCLUSIVE MODE`);
    reading = (async () => {
      for await (const row of f.router.sqlStream(text, [], { batchSize: 7 })) rows.push(row);
    })();
    reading.catch(() => {});
    for (let i = 0; ; i++) {
      const { rows: waiting } = await blocker.query(
        `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid)
          WHERE NOT l.granted AND l.relation = $1::regclass AND a.application_name = 'shardflake router'`,
        [`"${shardSchema(f.config, locked)}".${table}`],
      );
      if ((waiting[0] as { n: number }).n > 0) break;
      assert.ok(i < 500, 'the stream never reached the locked shard');
      await new Promise((r) => setTimeout(r, 20));
    }
    // The stream has read its map and waits inside its statement: the move switches and its old copy goes.
    release();
    assert.equal((await moved).to, first);
    const cleaned = await cleanupCluster(f.config);
    assert.deepEqual(
      cleaned.droppedCopies.map((c) => [c.shard, c.server]),
      [[moving, second]],
    );
  } finally {
    release();
    await blocker.query('COMMIT');
    await blocker.end();
  }
  await reading;
  assert.equal(f.router.placement(moving).server, first, 'the router follows the move');
  return rows;
}

describe('router.sqlStream and a shard moved between its plan and its read', { timeout: 60_000 }, () => {
  it('ordered by id: every row once, in order, read on the new home', async () => {
    const text = 'SELECT id, country, age FROM users ORDER BY id DESC';
    const got = await streamRacingAMove(text, 'users');
    const want = (await f.plain.query(text)).rows as Row[];
    assert.deepEqual(show(got), show(want));
  });

  it('unordered: every row once (the first server’s rows are not given twice)', async () => {
    const text = 'SELECT id, user_id, caption FROM photos';
    const got = show(await streamRacingAMove(text, 'photos')).sort();
    const want = show((await f.plain.query(text)).rows as Row[]).sort();
    assert.equal(got.length, want.length);
    assert.deepEqual(got, want);
  });
});
