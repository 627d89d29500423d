import { readdirSync, readFileSync } from 'node:fs';
import { readShardMap, type ShardPlacement } from 'shardflake/internal/catalog/shards.js';
import type { ClusterConfig } from 'shardflake/internal/config/config.js';
import { qualified } from 'shardflake/internal/postgres/identifier.js';
import { recoverCluster } from 'shardflake/internal/recovery/cluster-access.js';
import type { Router } from 'shardflake/internal/router/router.js';
import { closeAll, connectAll, connectServer } from 'shardflake/internal/topology/connections.js';
import type { Stage, StageOptions } from './faults-stage.js';

/**
 * What the scenarios of `bench faults` that write across servers (faults-cross-scenarios.ts) run and count: writer
 * loops whose every acknowledged call is logged and whose calls are bounded (a call still running HUNG_MS after
 * the writers were told to stop is hung), transfers between accounts on two servers through `withShards`, and the
 * count of what landed once recovery has settled everything in doubt.
 *
 * What each count means (a run with any of the last five above zero failed):
 * - acknowledged: calls the router returned from without an error;
 * - lost: acknowledged calls whose rows are nowhere;
 * - half-applied: a write across servers found on some of its servers and not the others (acknowledged or not:
 *   a call that failed must have changed nothing anywhere, or everything);
 * - duplicated: a write applied twice (a retry of something that had committed);
 * - diverged: state that no longer agrees with itself — an account whose balance is not its opening balance plus
 *   its entries, money not conserved, reference copies that differ (`cluster verify`), lookup entries that do not
 *   match their rows;
 * - hung: calls that had not returned HUNG_MS after the writers were asked to stop.
 */
export interface CrossCount {
  acknowledged: number;
  lost: number;
  halfApplied: number;
  duplicated: number;
  diverged: number;
  hung: number;
  /** Calls that failed (not acknowledged), by error code. */
  failed: Record<string, number>;
  /** A few of what went wrong, for the report. */
  examples: string[];
  /** The longest time between two acknowledged calls of one writer while the writers ran (ms). */
  longestGapMs: number;
}

/** What a scenario that writes across servers is given: its servers and a notebook. */
export interface CrossContext {
  stage: Stage;
  note(line: string): void;
}

/** A scenario that writes across servers (faults-cross-scenarios.ts); faults.ts runs it as one of SCENARIOS. */
export interface CrossScenario {
  title: string;
  stage: StageOptions;
  /** Before the scenario (data, replication settings). */
  prepare?: (stage: Stage) => Promise<void>;
  /** Its writers, fault and count; the config an operator would use afterwards. */
  cross(context: CrossContext): Promise<{ config: ClusterConfig; count: CrossCount }>;
  /** Once the scenario is over, whatever it ended (undoes what `prepare` set on this process). */
  done?: () => void;
}

/** A call still running this long after the writers were asked to stop is hung (every router wait is shorter). */
export const HUNG_MS = 30_000;

export interface Ack {
  token: string;
  writer: number;
  /** performance.now() when the router acknowledged it. */
  at: number;
}

export interface CallLog {
  acknowledged: Ack[];
  failed: Record<string, number>;
  /** Tokens of the calls that had not returned HUNG_MS after stop(). */
  hung: string[];
  /** performance.now() when the writers started and when they were asked to stop. */
  from: number;
  to: number;
}

export interface Loops {
  stop(): Promise<CallLog>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs `writers` loops of `call(writer, n, token)` until stop(): a call that resolves is acknowledged, one that
 * throws is counted by its error's code. stop() waits at most `hungMs` (HUNG_MS) for the calls in flight; the ones
 * still running then are hung.
 */
export function startLoops(
  writers: number,
  prefix: string,
  call: (writer: number, n: number, token: string) => Promise<unknown>,
  hungMs = HUNG_MS,
): Loops {
  const log: CallLog = { acknowledged: [], failed: {}, hung: [], from: performance.now(), to: 0 };
  const inFlight = new Map<number, string>();
  let stopping = false;
  const loops = Array.from({ length: writers }, async (_, writer) => {
    for (let n = 0; !stopping; n++) {
      const token = `${prefix}${writer}-${n}`;
      inFlight.set(writer, token);
      try {
        await call(writer, n, token);
        log.acknowledged.push({ token, writer, at: performance.now() });
      } catch (error) {
        const code = (error as { code?: string }).code ?? 'ERROR';
        log.failed[code] = (log.failed[code] ?? 0) + 1;
        await sleep(20);
      } finally {
        inFlight.delete(writer);
      }
    }
  });
  return {
    async stop() {
      stopping = true;
      log.to = performance.now();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all(loops),
        new Promise((r) => {
          timer = setTimeout(r, hungMs);
        }),
      ]);
      clearTimeout(timer);
      log.hung = [...inFlight.values()];
      return log;
    },
  };
}

/** The longest time a writer went without an acknowledged call, from `from` to `to`. */
export function longestGap(acks: readonly Ack[], writers: number, from: number, to: number): number {
  let longest = 0;
  for (let w = 0; w < writers; w++) {
    let last = from;
    for (const t of [...acks.filter((a) => a.writer === w).map((a) => a.at), to].sort((x, y) => x - y)) {
      longest = Math.max(longest, t - last);
      last = t;
    }
  }
  return Math.round(longest);
}

/** Logs merged (several writer sets of one scenario: a killed coordinator, the writers after it). */
export function mergeCallLogs(logs: readonly CallLog[]): CallLog {
  const merged: CallLog = { acknowledged: [], failed: {}, hung: [], from: Number.POSITIVE_INFINITY, to: 0 };
  for (const log of logs) {
    merged.acknowledged.push(...log.acknowledged);
    merged.hung.push(...log.hung);
    for (const [code, n] of Object.entries(log.failed)) merged.failed[code] = (merged.failed[code] ?? 0) + n;
    merged.from = Math.min(merged.from, log.from);
    merged.to = Math.max(merged.to, log.to);
  }
  return merged;
}

/**
 * Settles everything in doubt by its decision, as `cluster recover --in-doubt-after 0` would once every
 * coordinator is gone; tries again while a server does not answer yet (a promotion in progress), for up to 60 s.
 */
export async function recoverAll(config: ClusterConfig): Promise<{ committed: number; rolledBack: number }> {
  const done = { committed: 0, rolledBack: 0 };
  const deadline = performance.now() + 60_000;
  for (;;) {
    const report = await recoverCluster(config, { inDoubtAfterMs: 0 }).catch(() => undefined);
    if (report) {
      done.committed += report.committed.length;
      done.rolledBack += report.rolledBack.length;
      if (report.waiting.length === 0 && report.unreachable.length === 0) return done;
    }
    if (performance.now() > deadline) throw new Error('transactions stayed in doubt for 60 s');
    await sleep(200);
  }
}

/** The pids of a process and its children (from /proc), the process first. */
function processTree(pid: number): number[] {
  const children = readdirSync('/proc').flatMap((entry) => {
    if (!/^[0-9]+$/.test(entry)) return [];
    try {
      // /proc/<pid>/stat: "pid (comm) state ppid …"; comm may hold spaces, so read after the last ')'.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      return ppid === pid ? [Number(entry)] : [];
    } catch {
      return [];
    }
  });
  return [pid, ...children];
}

/**
 * kill -9 of a server's postmaster and every backend, synchronously: called from a router's event hook, the
 * server is gone before the router sends its next statement (a crash at an exact step, like a power cut).
 */
export function killTree(pid: number): void {
  for (const p of processTree(pid)) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

/** The rows of one statement in every shard's home (the catalog's map), per shard. */
async function inEveryHome<R>(config: ClusterConfig, sql: (schema: string) => string): Promise<R[]> {
  const catalog = await connectServer(config, config.catalog, { requireAll: false });
  const map = await readShardMap(catalog).finally(() => catalog.end());
  const byServer = new Map<string, ShardPlacement[]>();
  for (const s of map.shards) byServer.set(s.server, [...(byServer.get(s.server) ?? []), s]);
  const rows: R[] = [];
  for (const [server, shards] of byServer) {
    const client = await connectServer(config, server, { requireAll: false });
    try {
      for (const s of shards) rows.push(...((await client.query(sql(s.schema))).rows as R[]));
    } finally {
      await client.end();
    }
  }
  return rows;
}

// Transfers -------------------------------------------------------------------------------------------------------

/** The tables of the transfer scenarios, in every shard. */
export const TRANSFER_TABLES = {
  accounts: 'CREATE TABLE accounts (id bigint PRIMARY KEY DEFAULT next_id(), balance bigint NOT NULL)',
  entries:
    'CREATE TABLE entries (id bigint PRIMARY KEY DEFAULT next_id(), token text NOT NULL, account bigint NOT NULL, amount bigint NOT NULL)',
};

/** Every account opens with this balance. */
export const OPENING_BALANCE = 1_000_000n;

export interface Account {
  shard: number;
  id: bigint;
}

/** Two accounts on two servers that one writer moves money between, both ways. */
export interface Pair {
  x: Account;
  y: Account;
}

/** Opens two accounts per pair of shards (one writer per pair: the transfers never contend). */
export async function openAccounts(router: Router, shards: readonly [number, number][]): Promise<Pair[]> {
  const open = (shard: number) =>
    router.insert('accounts', { balance: OPENING_BALANCE }, { shard }).then((id) => ({ shard, id }));
  const pairs: Pair[] = [];
  for (const [x, y] of shards) pairs.push({ x: await open(x), y: await open(y) });
  return pairs;
}

/**
 * Transfer `n` of a writer: 1 to 7 units from one account to the other (the direction alternates), the debit, the
 * credit and an entry on each side (with the call's token) in one `withShards` across the two servers.
 */
export function transfer(router: Router, pair: Pair, n: number, token: string): Promise<void> {
  const [from, to] = n % 2 === 0 ? [pair.x, pair.y] : [pair.y, pair.x];
  const amount = BigInt(1 + (n % 7));
  return router.withShards([{ shard: from.shard }, { shard: to.shard }], async ([debit, credit]) => {
    if (!debit || !credit) throw new Error('two sessions expected');
    await debit.query('UPDATE accounts SET balance = balance - $2 WHERE id = $1', [from.id, amount]);
    await debit.query('INSERT INTO entries (token, account, amount) VALUES ($1, $2, $3)', [
      token,
      from.id,
      -amount,
    ]);
    await credit.query('UPDATE accounts SET balance = balance + $2 WHERE id = $1', [to.id, amount]);
    await credit.query('INSERT INTO entries (token, account, amount) VALUES ($1, $2, $3)', [
      token,
      to.id,
      amount,
    ]);
  });
}

/**
 * The count of a transfer scenario, once recovery has settled everything: each token must have exactly its two
 * entries (debit and credit, on the pair's two accounts), every account's balance must be its opening balance plus
 * its entries, and the money in all accounts must be what was opened.
 */
export async function countTransfers(
  config: ClusterConfig,
  pairs: readonly Pair[],
  log: CallLog,
): Promise<CrossCount> {
  const entries = await inEveryHome<{ token: string; account: string; amount: string }>(
    config,
    (schema) =>
      `SELECT token, account::text AS account, amount::text AS amount FROM ${qualified(schema, 'entries')}`,
  );
  const balances = await inEveryHome<{ id: string; balance: string }>(
    config,
    (schema) => `SELECT id::text AS id, balance::text AS balance FROM ${qualified(schema, 'accounts')}`,
  );
  const byToken = new Map<string, { account: string; amount: bigint }[]>();
  for (const e of entries)
    byToken.set(e.token, [...(byToken.get(e.token) ?? []), { account: e.account, amount: BigInt(e.amount) }]);
  const examples: string[] = [];
  const example = (line: string) => {
    if (examples.length < 6) examples.push(line);
  };
  let lost = 0;
  for (const a of log.acknowledged) {
    if (!byToken.has(a.token)) {
      lost++;
      example(`LOST transfer ${a.token}`);
    }
  }
  let halfApplied = 0;
  let duplicated = 0;
  for (const [token, rows] of byToken) {
    if (rows.length > 2) {
      duplicated++;
      example(`DUPLICATED transfer ${token}: ${rows.length} entries`);
    } else if (rows.length < 2 || rows[0]?.account === rows[1]?.account) {
      halfApplied++;
      example(`HALF-APPLIED transfer ${token}: ${rows.map((r) => `${r.amount} on ${r.account}`).join(', ')}`);
    }
  }
  let diverged = 0;
  const sums = new Map<string, bigint>();
  for (const e of entries) sums.set(e.account, (sums.get(e.account) ?? 0n) + BigInt(e.amount));
  const ours = new Set(pairs.flatMap((p) => [p.x.id.toString(), p.y.id.toString()]));
  let total = 0n;
  for (const b of balances) {
    if (!ours.has(b.id)) continue;
    total += BigInt(b.balance);
    const expected = OPENING_BALANCE + (sums.get(b.id) ?? 0n);
    if (BigInt(b.balance) !== expected) {
      diverged++;
      example(`DIVERGED account ${b.id}: balance ${b.balance}, opening balance and entries say ${expected}`);
    }
  }
  if (total !== OPENING_BALANCE * BigInt(ours.size)) {
    diverged++;
    example(`DIVERGED money not conserved: ${total} in all, ${OPENING_BALANCE * BigInt(ours.size)} opened`);
  }
  for (const token of log.hung) example(`HUNG ${token}`);
  return {
    acknowledged: log.acknowledged.length,
    lost,
    halfApplied,
    duplicated,
    diverged,
    hung: log.hung.length,
    failed: log.failed,
    examples,
    longestGapMs: longestGap(log.acknowledged, pairs.length, log.from, log.to),
  };
}

// Reference copies --------------------------------------------------------------------------------------------------

/** The reference tables of the reference scenario: each write puts its token in both. */
export const REFERENCE_TABLES = {
  plans: 'CREATE TABLE plans (token text PRIMARY KEY)',
  features: 'CREATE TABLE features (token text PRIMARY KEY)',
};

/** One reference write: the token in both tables, in the order `n` picks (writers touch them both ways). */
export function writeReference(router: Router, n: number, token: string): Promise<unknown> {
  return router.withReference(async (s) => {
    const tables = n % 2 === 0 ? ['plans', 'features'] : ['features', 'plans'];
    for (const table of tables) await s.query(`INSERT INTO ${table} (token) VALUES ($1)`, [token]);
  });
}

/**
 * The count of the reference scenario: every copy's tokens, per table. A token is lost when acknowledged and on no
 * copy, half-applied when some copy or table lacks it while another has it; `problems` (cluster verify's reference
 * check, which compares the copies' contents) counts as diverged.
 */
export async function countReference(
  config: ClusterConfig,
  servers: readonly string[],
  log: CallLog,
  writers: number,
  problems: readonly string[],
): Promise<CrossCount> {
  const clients = await connectAll({ ...config, servers: pick(config.servers, servers) });
  const places: Set<string>[] = [];
  try {
    for (const server of servers) {
      const client = clients.get(server);
      if (!client) continue;
      for (const table of Object.keys(REFERENCE_TABLES)) {
        const { rows } = await client.query(`SELECT token FROM shardflake_reference.${table}`);
        places.push(new Set((rows as { token: string }[]).map((r) => r.token)));
      }
    }
  } finally {
    await closeAll(clients);
  }
  const examples: string[] = [];
  const all = new Set(places.flatMap((p) => [...p]));
  let lost = 0;
  for (const a of log.acknowledged) {
    if (!all.has(a.token)) {
      lost++;
      if (examples.length < 6) examples.push(`LOST reference write ${a.token}`);
    }
  }
  let halfApplied = 0;
  for (const token of all) {
    const on = places.filter((p) => p.has(token)).length;
    if (on !== places.length) {
      halfApplied++;
      if (examples.length < 6) examples.push(`HALF-APPLIED ${token}: in ${on} of ${places.length} tables`);
    }
  }
  for (const p of problems.slice(0, 3)) examples.push(`DIVERGED ${p}`);
  for (const token of log.hung) examples.push(`HUNG ${token}`);
  return {
    acknowledged: log.acknowledged.length,
    lost,
    halfApplied,
    duplicated: 0,
    diverged: problems.length,
    hung: log.hung.length,
    failed: log.failed,
    examples,
    longestGapMs: longestGap(log.acknowledged, writers, log.from, log.to),
  };
}

function pick<T>(record: Readonly<Record<string, T>>, keys: readonly string[]): Record<string, T> {
  return Object.fromEntries(keys.flatMap((k) => (record[k] === undefined ? [] : [[k, record[k] as T]])));
}

// Unique lookups ----------------------------------------------------------------------------------------------------

/** The table and lookup of the lookups scenario. */
export const LOOKUP_CONFIG = {
  tables: { users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), email text, token text)' },
  lookups: { user_email: { table: 'users', column: 'email', unique: true } },
};

/**
 * The count of the lookups scenario: each value claimed by racing writers must have at most one owner row in the
 * whole cluster and at most one acknowledged claim; every acknowledged claim's row must be there, with the
 * acknowledged token; `problems` (the lookup check of cluster verify: a row without its entry, an entry without its
 * row) are half-applied claims.
 */
export async function countClaims(
  config: ClusterConfig,
  log: CallLog,
  writers: number,
  emailOf: (token: string) => string,
  problems: readonly string[],
): Promise<CrossCount> {
  const rows = await inEveryHome<{ email: string; token: string }>(
    config,
    (schema) => `SELECT email, token FROM ${qualified(schema, 'users')}`,
  );
  const owners = new Map<string, string[]>();
  for (const r of rows) owners.set(r.email, [...(owners.get(r.email) ?? []), r.token]);
  const examples: string[] = [];
  const example = (line: string) => {
    if (examples.length < 6) examples.push(line);
  };
  let duplicated = 0;
  for (const [email, tokens] of owners) {
    if (tokens.length > 1) {
      duplicated++;
      example(`DUPLICATED ${email}: ${tokens.length} owners (${tokens.join(', ')})`);
    }
  }
  const claimed = new Map<string, string[]>();
  for (const a of log.acknowledged)
    claimed.set(emailOf(a.token), [...(claimed.get(emailOf(a.token)) ?? []), a.token]);
  let lost = 0;
  for (const [email, tokens] of claimed) {
    if (tokens.length > 1) {
      duplicated++;
      example(`DUPLICATED ${email}: ${tokens.length} acknowledged claims`);
    }
    for (const token of tokens) {
      if (!(owners.get(email) ?? []).includes(token)) {
        lost++;
        example(`LOST claim ${token} of ${email}`);
      }
    }
  }
  for (const p of problems.slice(0, 3)) example(`HALF-APPLIED ${p}`);
  for (const token of log.hung) example(`HUNG ${token}`);
  return {
    acknowledged: log.acknowledged.length,
    lost,
    halfApplied: problems.length,
    duplicated,
    diverged: 0,
    hung: log.hung.length,
    failed: log.failed,
    examples,
    longestGapMs: longestGap(log.acknowledged, writers, log.from, log.to),
  };
}
