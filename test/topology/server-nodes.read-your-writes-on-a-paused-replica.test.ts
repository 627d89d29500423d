import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { createServerNodes } from '../../packages/shardflake/src/topology/server-nodes.js';
import { useServers } from '../support/postgres.js';
import { caughtUp, type Replica, startReplica } from '../support/replicas.js';

/**
 * One primary and one streaming replica whose replay is paused (`pg_wal_replay_pause()`): the replica keeps
 * receiving WAL but its data stays where it was, so a read served by it cannot see a newer write. Reads that must
 * see a write have to go to the primary; reads with nothing to wait for must still go to the replica, which its
 * own statistics show.
 */
async function one<T>(url: string, sql: string): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(sql)).rows[0] as T;
  } finally {
    await client.end();
  }
}

/** Sequential scans of `t` as the replica counts them (its statistics are flushed within about a second). */
async function replicaScans(replica: Replica): Promise<number> {
  return Number(
    (
      await one<{ n: string }>(
        replica.url,
        "SELECT coalesce(seq_scan, 0) AS n FROM pg_stat_user_tables WHERE relname = 't'",
      )
    ).n,
  );
}

async function eventually(check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`never: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const [primary] = (await useServers(1)) as [EmbeddedServer];
const replica = await startReplica(primary);
await one(primary.url, 'CREATE TABLE t (id int PRIMARY KEY)');
await caughtUp(primary, replica);

describe('server nodes with a paused replica', () => {
  // the config lists the replica first: roles come from the nodes, not from the order
  const nodes = createServerNodes('a', [replica.url, primary.url], { poolSize: 2, replicaCheckMs: 50 });
  after(() => nodes.end());

  it('sends a read that must see a write to the primary while the replica has not replayed it', async () => {
    assert.equal(nodes.hasReplicas, true);
    await one(replica.url, 'SELECT pg_wal_replay_pause()');
    const write = await nodes.acquire({ intent: 'write' });
    assert.equal(write.role, 'primary');
    await write.client.query('INSERT INTO t VALUES (1)');
    const position = await nodes.positionAfterWrite(write);
    write.release();
    assert.match(position ?? '', /^[0-9A-F]+\/[0-9A-F]+$/);

    const mustSee = await nodes.acquire({ intent: 'read', after: position });
    assert.equal(mustSee.role, 'primary');
    assert.equal((await mustSee.client.query('SELECT count(*)::int AS n FROM t')).rows[0].n, 1);
    mustSee.release();

    // nothing to wait for: the replica serves it, and does not have the row (its replay is paused)
    const free = await nodes.acquire({ intent: 'read' });
    assert.equal(free.role, 'replica');
    assert.equal((await free.client.query('SELECT count(*)::int AS n FROM t')).rows[0].n, 0);
    free.release();
  });

  it('serves reads with nothing to wait for from the replica, as its own counters show', async () => {
    const before = await replicaScans(replica);
    for (let i = 0; i < 20; i++) {
      const lease = await nodes.acquire({ intent: 'read' });
      assert.equal(lease.role, 'replica');
      await lease.client.query('SELECT count(*) FROM t');
      // an idle backend reports its statistics only every 10 s; this one reports at its next transaction end
      await lease.client.query('SELECT pg_stat_force_next_flush()');
      lease.release();
    }
    await eventually(
      async () => (await replicaScans(replica)) >= before + 20,
      'the replica counted 20 scans of t',
    );
  });

  it('sends the read to the replica once it has replayed the write', async () => {
    const write = await nodes.acquire({ intent: 'write' });
    await write.client.query('INSERT INTO t VALUES (2)');
    const position = await nodes.positionAfterWrite(write);
    write.release();
    await one(replica.url, 'SELECT pg_wal_replay_resume()');
    await caughtUp(primary, replica);
    const read = await nodes.acquire({ intent: 'read', after: position });
    assert.equal(read.role, 'replica');
    assert.equal((await read.client.query('SELECT count(*)::int AS n FROM t')).rows[0].n, 2);
    read.release();
  });

  it('leaves a replica lagging beyond the bound alone until it catches up', async () => {
    const strict = createServerNodes('a', [primary.url, replica.url], {
      poolSize: 1,
      maxReplicaLagMs: 300,
      replicaCheckMs: 20,
    });
    try {
      const first = await strict.acquire({ intent: 'read' });
      first.release();
      assert.equal(first.role, 'replica');
      await one(replica.url, 'SELECT pg_wal_replay_pause()');
      await one(primary.url, 'INSERT INTO t VALUES (3)');
      await new Promise((r) => setTimeout(r, 600));
      await one(primary.url, 'INSERT INTO t VALUES (4)'); // received, not replayed: the replica is 600+ ms behind
      await eventually(async () => {
        const lease = await strict.acquire({ intent: 'read' });
        lease.release();
        return lease.role === 'primary';
      }, 'a lagging replica is left alone');
      await one(replica.url, 'SELECT pg_wal_replay_resume()');
      await eventually(async () => {
        const lease = await strict.acquire({ intent: 'read' });
        lease.release();
        return lease.role === 'replica';
      }, 'the replica is used again once it caught up');
    } finally {
      await strict.end();
    }
  });
});
