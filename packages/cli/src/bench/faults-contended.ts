import { readShardMap } from 'shardflake/internal/catalog/shards.js';
import { DEADLOCK_DEFAULTS } from 'shardflake/internal/deadlocks/detector.js';
import { qualified } from 'shardflake/internal/postgres/identifier.js';
import { createRouter } from 'shardflake/internal/router/router.js';
import { connectServer } from 'shardflake/internal/topology/connections.js';
import {
  balances,
  runTransfers,
  startTransferCluster,
  type TransferCall,
  type TransferCluster,
} from './transfers.js';

/**
 * The `contended-transfers` scenario of `bench faults` (issue 29): clients move money both ways between a few hot
 * accounts on two servers with withShards, each side of a transfer writing a ledger row in its shard in the same
 * transaction (transfers.ts) — the load that deadlocked for ever before the deadlock detector. The fault is the
 * contention itself: cycles of waits across the two servers form all the time and must be broken, with no call
 * hanging and nothing applied by halves.
 *
 * Afterwards every transfer is looked up in both servers' ledgers:
 * - acknowledged: calls that resolved (committed);
 * - lost: acknowledged transfers found on neither server;
 * - half-applied: transfers found on one server only (whatever the call said);
 * - duplicated: transfers with more than one ledger row on a server;
 * - diverged: accounts whose balance is not their start plus their ledger, plus transfers whose call failed with an
 *   error that says nothing committed (DEADLOCK, LOCK_TIMEOUT, IDLE_TIMEOUT, TRANSACTION_ABORTED, DATABASE_ERROR)
 *   but that the ledgers hold;
 * - hung: calls that took longer than their bounds allow (each of a transfer's two statements may wait up to
 *   lock_timeout; plus the detector's look and 2 s), or had not settled a minute after the run.
 */
export interface ContendedScenarioOptions {
  seconds?: number;
  clients?: number;
  hotAccounts?: number;
  /** Test hook, after the run and before the count: lets a test damage the ledgers to prove the count sees it. */
  beforeCount?: (cluster: TransferCluster, calls: readonly TransferCall[]) => Promise<void>;
}

export interface ContendedScenarioResult {
  acknowledged: number;
  lost: number;
  halfApplied: number;
  duplicated: number;
  diverged: number;
  hung: number;
  /** Failed calls by code. */
  failed: Record<string, number>;
  longestCallMs: number;
  /** Longest time without an acknowledged transfer while the clients ran. */
  longestGapMs: number;
  notes: string[];
  examples: string[];
}

/** Errors after which a transfer must have committed nothing anywhere. */
const NOTHING_COMMITTED = [
  'DEADLOCK',
  'LOCK_TIMEOUT',
  'IDLE_TIMEOUT',
  'TRANSACTION_ABORTED',
  'DATABASE_ERROR',
];

const HUNG_AFTER_MS = 2 * DEADLOCK_DEFAULTS.lockTimeoutMs + 1.5 * DEADLOCK_DEFAULTS.deadlockCheckMs + 2000;

export async function runContendedTransfers(
  options: ContendedScenarioOptions = {},
): Promise<ContendedScenarioResult> {
  const seconds = options.seconds ?? 15;
  const clients = options.clients ?? 6;
  const cluster = await startTransferCluster({
    hotAccounts: options.hotAccounts ?? 3,
    startBalance: 1_000_000n,
  });
  try {
    // The application's router, with the defaults: the detector on, the bounds at 10 s and 60 s.
    const router = await createRouter(cluster.config, { listen: false, poolSize: clients });
    let calls: TransferCall[];
    const started = performance.now();
    let deadlocks = 0;
    try {
      calls = await runTransfers(router, cluster, { clients, ms: seconds * 1000, ledger: true });
    } finally {
      await router.close();
    }
    await options.beforeCount?.(cluster, calls);
    const ledgers = await Promise.all([0, 1].map((shard) => ledgerOf(cluster, shard)));
    const counted = await createRouter(cluster.config, { listen: false, transactions: { recovery: false } });
    const [onA, onB] = await balances(counted, cluster).finally(() => counted.close());
    const result: ContendedScenarioResult = {
      acknowledged: 0,
      lost: 0,
      halfApplied: 0,
      duplicated: 0,
      diverged: 0,
      hung: 0,
      failed: {},
      longestCallMs: 0,
      longestGapMs: 0,
      notes: [],
      examples: [],
    };
    const example = (line: string) => {
      if (result.examples.length < 10) result.examples.push(line);
    };
    const acks: number[] = [];
    for (const call of calls) {
      const rows = ledgers.map((l) => l.rows.get(call.id) ?? 0);
      const applied = rows.filter((n) => n > 0).length;
      if (call.ended === undefined || call.ended - call.started > HUNG_AFTER_MS) {
        result.hung++;
        example(
          `HUNG transfer ${call.id}: ${call.ended === undefined ? 'never settled' : `${Math.round(call.ended - call.started)} ms`}`,
        );
      }
      if (call.ended !== undefined)
        result.longestCallMs = Math.max(result.longestCallMs, call.ended - call.started);
      if (call.outcome === 'committed') {
        result.acknowledged++;
        acks.push(call.ended as number);
        if (applied === 0) {
          result.lost++;
          example(`LOST transfer ${call.id} (acknowledged, in neither ledger)`);
        }
      } else if (call.outcome !== undefined) {
        result.failed[call.outcome] = (result.failed[call.outcome] ?? 0) + 1;
        if (call.outcome === 'DEADLOCK') deadlocks++;
        if (applied > 0 && NOTHING_COMMITTED.includes(call.outcome)) {
          result.diverged++;
          example(`DIVERGED transfer ${call.id}: failed with ${call.outcome}, yet in the ledger`);
        }
      }
      if (applied === 1) {
        result.halfApplied++;
        example(`HALF-APPLIED transfer ${call.id}: in the ledger of server ${rows[0] ? 'a' : 'b'} only`);
      }
      if (rows.some((n) => n > 1)) {
        result.duplicated++;
        example(`DUPLICATED transfer ${call.id}: ${rows.join(' and ')} ledger rows`);
      }
    }
    // Every account: its balance is its start plus what its ledger moved.
    const balancesOf = [onA, onB];
    for (const shard of [0, 1]) {
      for (let account = 0; account < cluster.hotAccounts; account++) {
        const expected = cluster.startBalance + (ledgers[shard]?.byAccount.get(account) ?? 0n);
        const actual = balancesOf[shard]?.[account];
        if (actual !== expected) {
          result.diverged++;
          example(
            `DIVERGED account ${account} of shard ${shard}: balance ${actual}, its ledger says ${expected}`,
          );
        }
      }
    }
    acks.sort((x, y) => x - y);
    let last = started;
    for (const t of [...acks, started + seconds * 1000]) {
      result.longestGapMs = Math.max(result.longestGapMs, t - last);
      last = Math.max(last, t);
    }
    result.longestGapMs = Math.round(result.longestGapMs);
    result.longestCallMs = Math.round(result.longestCallMs);
    result.notes.push(
      `${clients} clients, ${cluster.hotAccounts} hot accounts on each of 2 servers, ${seconds} s; ${calls.length} calls, ${deadlocks} deadlock victims; longest call ${result.longestCallMs} ms (hung past ${HUNG_AFTER_MS} ms)`,
    );
    return result;
  } finally {
    await cluster.close();
  }
}

/** A shard's ledger, read on its server: rows per transfer, and the sum of deltas per account. */
async function ledgerOf(cluster: TransferCluster, shard: number) {
  const catalog = await connectServer(cluster.config, cluster.config.catalog);
  const home = await readShardMap(catalog)
    .then((map) => map.shards.find((s) => s.shard === shard))
    .finally(() => catalog.end());
  if (!home) throw new Error(`shard ${shard} is not in the map`);
  const client = await connectServer(cluster.config, home.server);
  try {
    const { rows } = await client.query(
      `SELECT transfer_id, account, delta FROM ${qualified(home.schema, 'ledger')}`,
    );
    const perTransfer = new Map<bigint, number>();
    const byAccount = new Map<number, bigint>();
    for (const r of rows as { transfer_id: bigint; account: number; delta: bigint }[]) {
      const id = BigInt(r.transfer_id);
      perTransfer.set(id, (perTransfer.get(id) ?? 0) + 1);
      byAccount.set(r.account, (byAccount.get(r.account) ?? 0n) + BigInt(r.delta));
    }
    return { rows: perTransfer, byAccount };
  } finally {
    await client.end();
  }
}
