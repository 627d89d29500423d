import { type EmbeddedServer, startEmbeddedServers } from '@shardflake/embedded';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { type ClusterConfig, validateConfig } from 'shardflake/internal/config/config.js';
import { isShardflakeError } from 'shardflake/internal/errors/errors.js';
import type { Router } from 'shardflake/internal/router/router.js';
import type { ShardSession } from 'shardflake/internal/routing/session.js';
import type { WithShardsOptions } from 'shardflake/internal/transactions/with-shards.js';

/**
 * Contended transfers across two servers, the workload of issue 29 (`bench cross --contended` and the
 * `contended-transfers` scenario of `bench faults`): a few hot accounts in shard 0 (server a) and in shard 1
 * (server b), and clients moving money between them in both directions. Each transfer debits its payer first and
 * credits its payee second, so a → b locks a row on a then waits on b, and b → a the opposite: the interleaving
 * that deadlocks across servers.
 *
 * With `ledger`, each side of a transfer also writes a row `(transfer id, account, delta)` in its own shard, in
 * the same transaction: afterwards every transfer can be checked for being applied on both servers, on one, or
 * twice (faults-contended.ts).
 */
export interface TransferCluster {
  config: ClusterConfig;
  servers: EmbeddedServer[];
  /** Hot accounts per server (ids 0 … hotAccounts − 1 in each of the two shards). */
  hotAccounts: number;
  /** Every balance at the start. */
  startBalance: bigint;
  close(): Promise<void>;
}

const TABLES = {
  accounts: 'CREATE TABLE accounts (id integer PRIMARY KEY, balance bigint NOT NULL)',
  // Keyed by its own id, not by (transfer_id, account): a transfer applied twice must show as two rows.
  ledger:
    'CREATE TABLE ledger (id bigint PRIMARY KEY DEFAULT next_id(), transfer_id bigint NOT NULL, account integer NOT NULL, delta bigint NOT NULL)',
};

export async function startTransferCluster(options: {
  hotAccounts: number;
  fsync?: boolean;
  startBalance?: bigint;
}): Promise<TransferCluster> {
  const servers = await startEmbeddedServers(2, {
    settings: { fsync: options.fsync === false ? 'off' : 'on' },
  });
  const startBalance = options.startBalance ?? 1_000_000n;
  try {
    const config = validateConfig(
      {
        servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
        catalog: 'a',
        logicalShards: 2,
        tables: TABLES,
      },
      'bench transfers',
    );
    await initCluster(config);
    const { createRouter } = await import('shardflake/internal/router/router.js');
    const loader = await createRouter(config, { listen: false, transactions: { recovery: false } });
    try {
      for (const shard of [0, 1])
        await loader.withShard({ shard }, (s) =>
          s.query('INSERT INTO accounts SELECT g, $2 FROM generate_series(0, $1::int - 1) g', [
            options.hotAccounts,
            startBalance,
          ]),
        );
    } finally {
      await loader.close();
    }
    return {
      config,
      servers,
      hotAccounts: options.hotAccounts,
      startBalance,
      close: async () => {
        await Promise.all(servers.map((s) => s.stop().catch(() => {})));
      },
    };
  } catch (error) {
    await Promise.all(servers.map((s) => s.stop().catch(() => {})));
    throw error;
  }
}

/** One call of withShards, as the workload saw it. */
export interface TransferCall {
  /** The transfer's id (the ledger's transfer_id). */
  id: bigint;
  from: 0 | 1;
  payer: number;
  payee: number;
  amount: bigint;
  /** performance.now() at the call and when it settled (undefined: it had not settled when the run ended). */
  started: number;
  ended?: number;
  /** `committed`, or the error's code (another error's message). */
  outcome?: string;
}

/**
 * Runs `clients` loops of transfers for `ms` on `router`, then waits for the calls in flight (up to `graceMs`;
 * those still open then are left unsettled in the log, and the loops return).
 */
export async function runTransfers(
  router: Router,
  cluster: TransferCluster,
  options: { clients: number; ms: number; ledger?: boolean; graceMs?: number; retry?: WithShardsOptions },
): Promise<TransferCall[]> {
  const calls: TransferCall[] = [];
  let nextId = 1n;
  const until = performance.now() + options.ms;
  const pick = () => Math.floor(Math.random() * cluster.hotAccounts);
  const loop = async () => {
    while (performance.now() < until) {
      const from = Math.random() < 0.5 ? 0 : 1;
      const call: TransferCall = {
        id: nextId++,
        from,
        payer: pick(),
        payee: pick(),
        amount: BigInt(1 + Math.floor(Math.random() * 5)),
        started: performance.now(),
      };
      calls.push(call);
      call.outcome = await router
        .withShards(
          [{ shard: from }, { shard: 1 - from }],
          async ([payer, payee]) => {
            await side(payer as ShardSession, call.payer, -call.amount, call.id, options.ledger);
            await side(payee as ShardSession, call.payee, call.amount, call.id, options.ledger);
          },
          options.retry,
        )
        .then(
          () => 'committed',
          (e: unknown) => (isShardflakeError(e) ? e.code : String((e as Error)?.message ?? e)),
        );
      call.ended = performance.now();
    }
  };
  const loops = Promise.all(Array.from({ length: options.clients }, loop));
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    loops,
    new Promise((resolve) => {
      timer = setTimeout(resolve, options.ms + (options.graceMs ?? 60_000));
    }),
  ]);
  clearTimeout(timer);
  return calls;
}

async function side(session: ShardSession, account: number, delta: bigint, id: bigint, ledger?: boolean) {
  const update = 'UPDATE accounts SET balance = balance + $2 WHERE id = $1';
  if (!ledger) {
    await session.query(update, [account, delta]);
    return;
  }
  await session.query(
    `WITH moved AS (${update} RETURNING id) INSERT INTO ledger (transfer_id, account, delta) SELECT $3, id, $2 FROM moved`,
    [account, delta, id],
  );
}

/** Every account's balance, per shard (index = account id). */
export async function balances(router: Router, cluster: TransferCluster): Promise<bigint[][]> {
  return Promise.all(
    [0, 1].map((shard) =>
      router.withShard({ shard }, async (s) => {
        const { rows } = await s.query<{ id: number; balance: bigint }>(
          'SELECT id, balance FROM accounts ORDER BY id',
        );
        const out = Array.from({ length: cluster.hotAccounts }, () => 0n);
        for (const r of rows) out[r.id] = BigInt(r.balance);
        return out;
      }),
    ),
  );
}
