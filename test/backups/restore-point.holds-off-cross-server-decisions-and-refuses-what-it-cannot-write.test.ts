import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { createRestorePoint } from '../../packages/shardflake/src/backups/restore-point.js';
import {
  findRestorePoint,
  RESTORE_POINT_LOCK,
} from '../../packages/shardflake/src/catalog/restore-points.js';
import { INSERT_DECISION_SQL } from '../../packages/shardflake/src/catalog/transactions.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { CLI_MAIN } from '../support/cli.js';
import { sqlRows, useServers } from '../support/postgres.js';
import { until } from '../transactions/support.js';

// Two servers, shards 0 and 1 on a, 2 and 3 on b. A transfer's decision server is the first one it joins.
const [a, b] = await useServers(2);
const raw = {
  servers: { a: a?.url as string, b: b?.url as string },
  catalog: 'a',
  logicalShards: 4,
  epoch: '2024-01-01T00:00:00Z',
  tables: { accounts: 'CREATE TABLE accounts (name text PRIMARY KEY, balance bigint NOT NULL)' },
};
const config = validateConfig(raw, 'test config');
const dir = mkdtempSync(join(tmpdir(), 'shardflake-restore-point-'));
const configFile = join(dir, 'cluster.json');
writeFileSync(configFile, JSON.stringify(raw));
let router: Router;

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { transactions: { recovery: false } });
  for (let shard = 0; shard < 4; shard++)
    await router.withShard({ shard }, (s) => s.query(`INSERT INTO accounts VALUES ('x', 100), ('y', 100)`));
});
after(async () => {
  await router?.close();
  rmSync(dir, { recursive: true, force: true });
});

function transfer(from: number, to: number) {
  return router.withShards([{ shard: from }, { shard: to }], async ([x, y]) => {
    await x?.query(`UPDATE accounts SET balance = balance - 1 WHERE name = 'x'`);
    await y?.query(`UPDATE accounts SET balance = balance + 1 WHERE name = 'x'`);
  });
}

async function total(): Promise<bigint> {
  let sum = 0n;
  for (let shard = 0; shard < 4; shard++)
    sum += await router.withShard({ shard }, async (s) => {
      const { rows } = await s.query<{ balance: bigint }>(`SELECT balance FROM accounts WHERE name = 'x'`);
      return rows[0]?.balance as bigint;
    });
  return sum;
}

/** Sessions on a server that wait for the restore-point lock (shared: a decision or a switch), by application name. */
async function waitingForTheLock(url: string, mode = 'ShareLock'): Promise<string[]> {
  const rows = await sqlRows<{ app: string }>(
    url,
    `SELECT a.application_name AS app FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND NOT l.granted AND l.mode = '${mode}'
        AND l.classid = ${RESTORE_POINT_LOCK[0]}::oid AND l.objid = ${RESTORE_POINT_LOCK[1]}::oid`,
  );
  return rows.map((r) => r.app);
}

function cli(...args: string[]) {
  return spawnSync(process.execPath, [CLI_MAIN, 'cluster', ...args, '--config', configFile], {
    encoding: 'utf8',
    timeout: 60_000,
  });
}

describe('while a restore point is written', () => {
  it('a commit across servers waits on its decision server; commits inside one server do not', async () => {
    let crossDone = false;
    let cross: Promise<void> | undefined;
    await createRestorePoint(config, 'held-1', {
      onLocked: async () => {
        cross = transfer(0, 2).then(() => {
          crossDone = true;
        });
        // The transfer's decision row waits for the lock on a, its decision server (the first it joined).
        await until(async () => (await waitingForTheLock(a?.url as string)).length === 1, 20_000, 'a wait');
        // (Other rows: the transfer holds its rows locked, prepared on b, until it commits.)
        await router.withShards([{ shard: 2 }, { shard: 3 }], async ([x, y]) => {
          await x?.query(`UPDATE accounts SET balance = balance - 5 WHERE name = 'y'`);
          await y?.query(`UPDATE accounts SET balance = balance + 5 WHERE name = 'y'`);
        });
        await router.withShard({ shard: 1 }, (s) =>
          s.query(`UPDATE accounts SET balance = balance + 1 WHERE name = 'y'`),
        );
        assert.equal(crossDone, false, 'the cross-server commit waited for the restore point');
      },
    });
    await cross;
    assert.equal(crossDone, true);
    assert.equal(await total(), 400n);
    assert.deepEqual(await waitingForTheLock(a?.url as string), []);
  });

  it("a move's switch waits for it on the catalog, then completes", async () => {
    let moved: Promise<unknown> | undefined;
    await createRestorePoint(config, 'held-2', {
      onLocked: async () => {
        moved = moveShard(config, 1, 'b');
        await until(
          async () =>
            (await waitingForTheLock(a?.url as string)).some((app) => app.startsWith('shardflake move')),
          60_000,
          "the move's switch to wait",
        );
        const [row] = await sqlRows<{ server: string }>(
          a?.url as string,
          'SELECT server FROM shardflake.shards WHERE shard = 1',
        );
        assert.equal(row?.server, 'a', 'not switched while the restore point holds the lock');
      },
    });
    await moved;
    const [row] = await sqlRows<{ server: string }>(
      a?.url as string,
      'SELECT server FROM shardflake.shards WHERE shard = 1',
    );
    assert.equal(row?.server, 'b');
    assert.equal(await total(), 400n);
  });
});

describe('a decision in flight', () => {
  it('is waited for when it commits within the lock timeout', async () => {
    const c = await connect(a?.url as string);
    try {
      await c.query('BEGIN');
      const { rowCount } = await c.query(INSERT_DECISION_SQL, ['restore-test-1', [], 60_000]);
      assert.equal(rowCount, 1);
      const taking = createRestorePoint(config, 'waited-1', { lockTimeoutMs: 2000 });
      // The restore point queues for the lock behind the decision; the decision commits 100 ms later.
      await until(async () => (await waitingForTheLock(a?.url as string, 'ExclusiveLock')).length === 1);
      await new Promise((r) => setTimeout(r, 100));
      await c.query('COMMIT');
      const point = await taking;
      assert.equal(point.attempts, 1);
      assert.ok(point.heldMs >= 100, `held ${point.heldMs} ms: it waited for the decision`);
    } finally {
      await c.end();
    }
  });

  it('that holds the lock past every attempt: nothing is written and the name stays free', async () => {
    const c = await connect(b?.url as string);
    try {
      await c.query('BEGIN');
      await c.query(INSERT_DECISION_SQL, ['restore-test-2', [], 60_000]);
      await assert.rejects(
        createRestorePoint(config, 'busy-1', { lockTimeoutMs: 20, attempts: 3 }),
        (e: unknown) =>
          isShardflakeError(e, 'RESTORE_POINT_FAILED') &&
          /server b kept deciding .* 3 attempts; no restore point was written/.test(e.message),
      );
      assert.equal(await findRestorePoint(await catalogClient(), 'busy-1'), null);
      await c.query('ROLLBACK');
    } finally {
      await c.end();
    }
    const point = await createRestorePoint(config, 'busy-1');
    assert.deepEqual(
      point.servers.map((s) => s.server),
      ['a', 'b'],
    );
    for (const s of point.servers) assert.match(s.lsn, /^[0-9A-F]+\/[0-9A-F]+$/);
  });
});

const catalogClients: Awaited<ReturnType<typeof connect>>[] = [];
async function catalogClient() {
  const c = await connect(a?.url as string);
  catalogClients.push(c);
  return c;
}
after(async () => {
  await Promise.all(catalogClients.map((c) => c.end()));
});

describe('the command', () => {
  it('prints what it wrote, and status shows it as the last restore point', () => {
    const r = cli('restore-point', '--name', 'cli-1', '--json');
    assert.equal(r.status, 0, r.stderr);
    const point = JSON.parse(r.stdout);
    assert.equal(point.name, 'cli-1');
    assert.deepEqual(Object.keys(point.servers[0]), ['server', 'lsn']);
    const text = cli('restore-point', '--name', 'cli-2');
    assert.equal(text.status, 0, text.stderr);
    assert.match(
      text.stdout,
      /^cluster restore-point: cli-2 taken \S+ on 2 servers; cross-server commits held off [\d.]+ ms \(1 attempt\)\n {2}a {2}[0-9A-F]+\/[0-9A-F]+\n {2}b {2}[0-9A-F]+\/[0-9A-F]+\n/,
    );
    const status = cli('status', '--json');
    assert.equal(status.status, 0, status.stderr);
    const last = JSON.parse(status.stdout).lastRestorePoint;
    assert.equal(last.name, 'cli-2');
    assert.equal(last.state, 'taken');
    assert.deepEqual(Object.keys(last.lsns), ['a', 'b']);
    assert.match(
      cli('status').stdout,
      /^last restore point: cli-2, taken \S+ \(a [0-9A-F/]+, b [0-9A-F/]+\)$/m,
    );
  });

  it('refuses a name used before, and a bad name, in one line (exit 2)', () => {
    const again = cli('restore-point', '--name', 'cli-1');
    assert.equal(again.status, 2);
    assert.match(
      again.stderr,
      /^shardflake: error \[RESTORE_POINT_EXISTS\]: restore point cli-1 was taken before \(taken, started \S+\); a name means one moment, choose another\n$/,
    );
    const bad = cli('restore-point', '--name', "x'; DROP TABLE y");
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /^shardflake: error \[INVALID_ARGUMENT\]: a restore point name is/);
  });

  it('refuses, naming the server, when a primary does not answer, and writes nothing', async () => {
    const down = join(dir, 'down.json');
    writeFileSync(
      down,
      JSON.stringify({
        ...raw,
        servers: { a: raw.servers.a, b: 'postgres://postgres:secret@127.0.0.1:1/postgres' },
      }),
    );
    const r = spawnSync(
      process.execPath,
      [CLI_MAIN, 'cluster', 'restore-point', '--config', down, '--name', 'down-1'],
      {
        encoding: 'utf8',
      },
    );
    assert.equal(r.status, 3);
    assert.match(
      r.stderr,
      /^shardflake: error \[SERVER_UNREACHABLE\]: server b: .*; no restore point was written\n$/,
    );
    assert.doesNotMatch(r.stderr, /secret/);
    assert.equal(await findRestorePoint(await catalogClient(), 'down-1'), null);
  });

  it('a server lost while the points are written: says where it was written and never to restore to it', async () => {
    await assert.rejects(
      createRestorePoint(config, 'partial-1', {
        // b's session ends between the locks and the writes, as a server that goes away would.
        onLocked: async () => {
          await sqlRows(
            b?.url as string,
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'shardflake restore-point'`,
          );
        },
      }),
      (e: unknown) =>
        isShardflakeError(e, 'RESTORE_POINT_FAILED') &&
        /^restore point partial-1 was written on a but not on b \(server b: .*\): do not restore to partial-1/.test(
          e.message,
        ),
    );
    const record = await findRestorePoint(await catalogClient(), 'partial-1');
    assert.equal(record?.state, 'partial');
    assert.deepEqual(Object.keys(record?.lsns ?? {}), ['a']);
    const status = cli('status');
    assert.match(
      status.stdout,
      /^last restore point: partial-1, PARTIAL \(written on a \S+\): never restore to it$/m,
    );
    assert.match(
      status.stdout,
      /warning: the latest restore point, partial-1, was not written on every server/,
    );
  });
});
