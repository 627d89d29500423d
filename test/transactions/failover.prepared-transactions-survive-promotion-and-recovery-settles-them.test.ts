import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createRouter, type Router } from 'shardflake';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { checkReferenceTables } from '../../packages/shardflake/src/reference/verify.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { startReplica } from '../support/replicas.js';
import { killServer, preparedGids, txidOf, until } from './support.js';

/**
 * Failover in the middle of a two-phase commit (issue 29, item 5), on real streaming replicas: each server is a
 * primary with a synchronous standby (a PREPARE or COMMIT is acknowledged once the standby has its WAL), the
 * config lists both nodes, and the HA tool's failover is done by hand — the primary killed -9, the standby promoted
 * with pg_promote. Router processes (pause-child.ts) stop at an exact step of their commit and go on when told, so
 * every interleaving below is the one named, not a likely one.
 *
 * Server b fails over with five writes in flight: withShards after b's PREPARE (no decision yet) and after the
 * decision; withReference inside its callback (before any PREPARE) and after b's PREPARE; and a lookup's commit
 * before b's PREPARE. Then server a — the decision server (the last agent) and the catalog — fails over with
 * decisions committed and not yet committed, two of the coordinators killed as well. Every prepared transaction
 * survives promotion, recovery settles each by its decision, writes before the decision run again on the new
 * primary, a decision lost with its server is COMMIT_UNKNOWN and rolled back, and nothing is half-applied.
 */
const [a, b] = (await useServers(2)) as [EmbeddedServer, EmbeddedServer];
const ra = await startReplica(a);
const rb = await startReplica(b);
const PAUSE_CHILD = fileURLToPath(new URL('./pause-child.js', import.meta.url));
const raw = {
  servers: { a: [a.url, ra.url], b: [b.url, rb.url] },
  catalog: 'a',
  logicalShards: 2,
  epoch: '2024-01-01T00:00:00Z',
  tables: {
    marks: 'CREATE TABLE marks (id bigint PRIMARY KEY DEFAULT next_id(), tag text NOT NULL)',
    users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), email text)',
  },
  referenceTables: {
    plans: 'CREATE TABLE plans (tag text PRIMARY KEY)',
    features: 'CREATE TABLE features (tag text PRIMARY KEY)',
  },
  lookups: { user_email: { table: 'users', column: 'email', unique: true } },
};
const config = validateConfig(raw, 'failover-config');
const dir = await mkdtemp(join(tmpdir(), 'shardflake-failover-2pc-'));
const configFile = join(dir, 'cluster.json');
let router: Router;
const children = new Set<ChildProcess>();

/** Makes the standby synchronous: a commit or PREPARE on `primary` returns once the standby has written it. */
async function synchronous(primary: EmbeddedServer): Promise<void> {
  const c = await connect(primary.url);
  try {
    const { rows } = await c.query('SELECT application_name AS name FROM pg_stat_replication');
    const name = (rows[0] as { name: string }).name;
    await c.query(`ALTER SYSTEM SET synchronous_standby_names = '"${name}"'`);
    await c.query('SELECT pg_reload_conf()');
    await until(async () => {
      const { rows: s } = await c.query("SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'");
      return s.length > 0;
    }, 10_000);
  } finally {
    await c.end();
  }
}

before(async () => {
  await writeFile(configFile, JSON.stringify(raw), { mode: 0o600 });
  await synchronous(a);
  await synchronous(b);
  await initCluster(config);
  router = await createRouter(config, {
    // Recovery runs when the test says; it never takes a paused writer for abandoned.
    transactions: { recovery: false, inDoubtAfterMs: 60_000 },
    replicas: { failoverWaitMs: 30_000, rediscoverMs: 50 },
  });
  assert.deepEqual([router.placement(0).server, router.placement(1).server], ['a', 'b']);
});
after(async () => {
  for (const child of children) child.kill('SIGKILL');
  await router?.close();
  await rm(dir, { recursive: true, force: true });
});

interface Paused {
  /** Resolves with the transaction's id once the child holds at its point. */
  at: Promise<string>;
  /** The child's RESULT line, once it ends (a killed child: null). */
  result: Promise<string | null>;
  child: ChildProcess;
}

/** Starts a router child that holds at `point` until the file `go` exists (pause-child.ts). */
function paused(kind: string, point: string, tag: string, go: string): Paused {
  const child = spawn(process.execPath, [PAUSE_CHILD, configFile, kind, point, tag, go], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let out = '';
  let err = '';
  child.stderr?.on('data', (d) => {
    err += d;
  });
  const ended = new Promise<void>((resolve) => child.on('close', () => resolve()));
  const at = new Promise<string>((resolve, reject) => {
    child.stdout?.on('data', (d) => {
      out += d;
      const m = /^AT \S+ (\S+)$/m.exec(out);
      if (m) resolve(m[1] as string);
    });
    void ended.then(() => reject(new Error(`${tag} ended before ${point}:\n${out}\n${err}`)));
  });
  at.catch(() => {});
  const result = ended.then(() => /^RESULT .*$/m.exec(out)?.[0] ?? null);
  return { at, result, child };
}

/** shardflake's prepared transactions on a node. */
const ours = async (url: string) => (await preparedGids(url)).filter((g) => g.startsWith('sf:')).sort();

/** One statement's rows on a node. */
async function rowsOn<T>(url: string, text: string): Promise<T[]> {
  const c = await connect(url);
  try {
    return (await c.query(text)).rows as T[];
  } finally {
    await c.end();
  }
}

/** The shards whose marks hold `tag` (through the router, which follows the promotions). */
async function shardsWith(tag: string): Promise<number[]> {
  const found: number[] = [];
  for (const shard of [0, 1]) {
    let n = 0;
    await until(async () => {
      try {
        n = await router.withShard({ shard }, async (s) =>
          Number((await s.query('SELECT count(*) AS n FROM marks WHERE tag = $1', [tag])).rows[0]?.n),
        );
        return true;
      } catch {
        return false; // a pooled connection to a node that died fails once, and is dropped
      }
    });
    if (n > 0) found.push(shard);
  }
  return found;
}

/** A reference table's tags on a node. */
const tagsOn = async (url: string, table: string) =>
  (await rowsOn<{ tag: string }>(url, `SELECT tag FROM shardflake_reference.${table} ORDER BY tag`)).map(
    (r) => r.tag,
  );

describe('failover in the middle of a two-phase commit', () => {
  it('a participant (b) fails over: prepared transactions survive on the promoted standby, recovery commits them, and writes before the decision run again there', async () => {
    const go = join(dir, 'go-b');
    const w = {
      shardsPrepared: paused('shards', 'prepare-done', 'b-prepared', go),
      shardsDecided: paused('shards', 'decide-done', 'b-decided', go),
      referenceInFn: paused('plans', 'in-fn', 'b-in-fn', go),
      referencePrepared: paused('features', 'prepare-done', 'b-prepared', go),
      lookupBeforePrepare: paused('lookup', 'prepare-start', 'b-lookup', go),
    };
    await Promise.all(Object.values(w).map((p) => p.at));
    // The exact point: three transactions prepared on b, one of them decided on a; two not prepared anywhere.
    const prepared = await ours(b.url);
    assert.equal(prepared.length, 3, prepared.join(' '));
    const decided = await w.shardsDecided.at;
    assert.ok(prepared.some((g) => txidOf(g) === decided));
    assert.deepEqual(
      await shardsWith('b-decided'),
      [0],
      'atomic, not isolated: only the decision server shows it',
    );

    await killServer(b);
    await rb.promote();
    // In the WAL, so on the promoted standby: every prepared transaction is still there.
    assert.deepEqual(await ours(rb.url), prepared);

    await writeFile(go, '');
    // Recovery runs beside the writers, as a router's background pass would: a writer may wait for a prepared
    // transaction's locks on b (the reference tables' digest rows) until it is settled.
    let done = false;
    const results = Promise.all(Object.values(w).map((p) => p.result)).finally(() => {
      done = true;
    });
    while (!done) {
      await router.recoverTransactions().catch(() => {});
      await new Promise((r) => setTimeout(r, 100));
    }
    const [shardsPrepared, shardsDecided, referenceInFn, referencePrepared, lookupBeforePrepare] =
      await results;
    // Decided before or despite the failover: acknowledged (COMMIT PREPARED on b is recovery's job).
    assert.equal(shardsPrepared, 'RESULT ok 1');
    assert.equal(shardsDecided, 'RESULT ok 1');
    assert.equal(referencePrepared, 'RESULT ok 1');
    // Failed before the decision: nothing committed, so the whole call ran again on the promoted standby.
    assert.equal(referenceInFn, 'RESULT ok 2');
    assert.equal(lookupBeforePrepare, 'RESULT ok 2');

    await until(async () => {
      await router.recoverTransactions().catch(() => {});
      return (await ours(rb.url)).length === 0;
    }, 20_000);
    assert.deepEqual(await shardsWith('b-prepared'), [0, 1]);
    assert.deepEqual(await shardsWith('b-decided'), [0, 1]);
    for (const url of [a.url, rb.url]) {
      assert.deepEqual(await tagsOn(url, 'plans'), ['b-in-fn-1', 'b-in-fn-2']);
      assert.deepEqual(await tagsOn(url, 'features'), ['b-prepared-1', 'b-prepared-2']);
    }
    // The lookup's row and its entry, once each.
    const users = await rowsOn<{ email: string }>(
      a.url,
      "SELECT email FROM shard_0000.users WHERE email LIKE 'b-lookup-%'",
    );
    assert.equal(users.length, 1);
    const hit = await router.lookup('user_email', users[0]?.email as string);
    assert.equal(hit?.shard, 0);
  });

  it('the decision server (a, also the catalog) fails over: committed decisions survive and are applied, lost ones are COMMIT_UNKNOWN and rolled back', async () => {
    const go = join(dir, 'go-a');
    const w = {
      shardsDecided: paused('shards', 'decide-done', 'a-decided', go),
      referenceDecided: paused('plans', 'decide-done', 'a-decided', go),
      shardsUndecided: paused('shards', 'decide-start', 'a-undecided', go),
      referenceUndecided: paused('features', 'decide-start', 'a-undecided', go),
    };
    const txids = Object.fromEntries(
      await Promise.all(Object.entries(w).map(async ([k, p]) => [k, await p.at] as const)),
    );
    assert.equal((await ours(rb.url)).length, 4, 'each is prepared on b');
    // The coordinators that decided die too: only recovery can finish them.
    for (const p of [w.shardsDecided, w.referenceDecided]) p.child.kill('SIGKILL');
    await Promise.all([w.shardsDecided.result, w.referenceDecided.result]);

    await killServer(a);
    await ra.promote();
    // The decisions are in the WAL: on the promoted standby, the committed ones are there and the others are not.
    const decisions = new Map(
      (
        await rowsOn<{ txid: string; outcome: string }>(
          ra.url,
          'SELECT txid, outcome FROM shardflake.transactions',
        )
      ).map((r) => [r.txid, r.outcome]),
    );
    assert.equal(decisions.get(txids.shardsDecided as string), 'commit');
    assert.equal(decisions.get(txids.referenceDecided as string), 'commit');
    assert.equal(decisions.get(txids.shardsUndecided as string), undefined);
    assert.equal(decisions.get(txids.referenceUndecided as string), undefined);

    await writeFile(go, '');
    // Their COMMIT went to a node that died: the outcome is unknown to them, and they did not run again.
    assert.match((await w.shardsUndecided.result) ?? '', /^RESULT error COMMIT_UNKNOWN /);
    assert.match((await w.referenceUndecided.result) ?? '', /^RESULT error COMMIT_UNKNOWN /);

    // `cluster recover` with the config as it was (a's old primary listed and dead) finds the promoted node.
    const run = await startCli(['cluster', 'recover', '--config', configFile, '--in-doubt-after', '0']).done;
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /committed 2, rolled back 2, still in doubt 0/);
    assert.deepEqual(await ours(rb.url), []);
    assert.deepEqual(await ours(ra.url), []);
    assert.deepEqual(await shardsWith('a-decided'), [0, 1]);
    assert.deepEqual(await shardsWith('a-undecided'), []);
    for (const url of [ra.url, rb.url]) {
      assert.deepEqual(await tagsOn(url, 'plans'), ['a-decided-1', 'a-decided-2', 'b-in-fn-1', 'b-in-fn-2']);
      assert.deepEqual(await tagsOn(url, 'features'), ['b-prepared-1', 'b-prepared-2']);
    }
    // The lost decisions can never commit late: recovery wrote their tombstones on the promoted decision server.
    const after = await rowsOn<{ txid: string; outcome: string }>(
      ra.url,
      `SELECT txid, outcome FROM shardflake.transactions WHERE txid IN ('${txids.shardsUndecided}', '${txids.referenceUndecided}')`,
    );
    assert.deepEqual(
      after.map((r) => r.outcome),
      ['abort', 'abort'],
    );
    // Checked on the nodes that are the primaries now.
    assert.deepEqual(
      await checkReferenceTables(validateConfig({ ...raw, servers: { a: ra.url, b: rb.url } }, 'promoted')),
      [],
    );
  });
});
