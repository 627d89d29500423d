import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createRouter, isShardflakeError, type Router, type RouterEvent } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

const servers = await useServers(2);
const config = testConfig(servers, {
  logicalShards: 4,
  tables: {
    photos:
      'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text)',
    counters: 'CREATE TABLE counters (name text PRIMARY KEY, n bigint NOT NULL)',
  },
});
const urlOf = (name: string) => servers.find((s) => s.name === name)?.url as string;
let router: Router;
const events: RouterEvent[] = [];

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { onEvent: (e) => events.push(e) });
});
after(async () => {
  await router?.close();
});

describe('shard sessions under moves and lost connections', () => {
  it('a shard moved while read-modify-write sessions run: the counter equals the acknowledged increments', async () => {
    const shard = 0;
    const from = router.placement(shard).server;
    const to = from === 'a' ? 'b' : 'a';
    await router.withShard({ shard }, (s) => s.query(`INSERT INTO counters VALUES ('hits', 0)`));
    let acknowledged = 0;
    let runs = 0;
    let stop = false;
    // The race: a session reads n on the old copy, the cutover locks and fences the old copy and switches the
    // map, the session's UPDATE then hits the fence (SF001). Re-running fn on the new home must read n again
    // there; re-running a committed transaction, or keeping the stale read, would break the count.
    const worker = async () => {
      while (!stop) {
        await router.withShard({ shard }, async (s) => {
          runs++;
          const { rows } = await s.query<{ n: bigint }>(
            `SELECT n FROM counters WHERE name = 'hits' FOR UPDATE`,
          );
          await s.query(`UPDATE counters SET n = $1 WHERE name = 'hits'`, [(rows[0]?.n ?? 0n) + 1n]);
        });
        acknowledged++;
      }
    };
    events.length = 0;
    const workers = Array.from({ length: 4 }, worker);
    await new Promise((r) => setTimeout(r, 200));
    await moveShard(config, shard, to);
    const atSwitch = acknowledged;
    await new Promise((r) => setTimeout(r, 200));
    stop = true;
    await Promise.all(workers);

    assert.equal(router.placement(shard).server, to);
    assert.ok(acknowledged > atSwitch, 'sessions kept committing after the move');
    const c = await connect(urlOf(to));
    const { rows } = await c.query(
      `SELECT n FROM "${shardSchema(config, shard)}".counters WHERE name = 'hits'`,
    );
    await c.end();
    assert.equal(rows[0]?.n, BigInt(acknowledged));
    const retries = events.filter((e) => e.type === 'retry');
    assert.ok(retries.length > 0, 'at least one session was re-run on the new home');
    assert.ok(runs > acknowledged, 'fn ran again for the retried sessions');
  });

  it('a connection lost during COMMIT is COMMIT_UNKNOWN, and fn is not run again', async () => {
    const shard = 1;
    const { server, schema } = router.placement(shard);
    const admin = await connect(urlOf(server));
    // A deferred trigger makes COMMIT itself slow, so the backend can be terminated while COMMIT is in flight.
    await admin.query(`CREATE TABLE "${schema}".slow_commit (id int);
      CREATE FUNCTION "${schema}".slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(5); RETURN NULL; END $$;
      CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON "${schema}".slow_commit DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION "${schema}".slow()`);
    let runs = 0;
    let pid = 0;
    const session = router.withShard({ shard }, async (s) => {
      runs++;
      pid = (await s.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid as number;
      await s.query('INSERT INTO slow_commit VALUES (1)');
    });
    const outcome = session.then(
      () => 'committed',
      (e: unknown) => e,
    );
    // Wait until that backend is inside COMMIT (sleeping in the deferred trigger), then kill it.
    for (;;) {
      const { rows } = await admin.query(
        `SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND query = 'COMMIT' AND wait_event = 'PgSleep'`,
        [pid],
      );
      if (rows.length > 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    await admin.query('SELECT pg_terminate_backend($1)', [pid]);
    const error = await outcome;
    assert.ok(isShardflakeError(error, 'COMMIT_UNKNOWN'), String(error));
    assert.equal(runs, 1, 'a transaction whose commit is unknown is never re-run');
    // The router goes on: the broken connection was thrown away.
    assert.equal(
      await router.withShard({ shard }, async (s) => (await s.query('SELECT 1 AS x')).rows[0]?.x),
      1,
    );
    await admin.end();
  });
});
