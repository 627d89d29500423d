import type pg from 'pg';
import { catalogHasCluster, readClusterId } from '../catalog/transactions.js';
import type { ClusterConfig } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import { type ServerAccess, wrapPgError } from '../postgres/connect.js';
import { connectServer } from '../topology/connections.js';
import { type InDoubtGid, listInDoubt, type RecoveryReport, recoverTransactions } from './recovery.js';
import { TRANSACTION_DEFAULTS } from './state.js';

/**
 * Recovery and inspection from a command (`cluster recover`, `cluster verify`, `cluster status`): one client per
 * server, connected on first use; a server that does not answer is reported, not fatal, so the others are still
 * settled. A server with replicas is reached at whichever node answers as its primary, even while another of its
 * nodes does not answer (the old primary of a failover): a transaction prepared before the failover is on the
 * promoted node, and recovery settles it there, by its decision, without waiting for the config to change.
 */
export function clusterAccess(
  config: Pick<ClusterConfig, 'servers' | 'nodes'>,
  applicationName = 'shardflake transactions',
): ServerAccess & { close(): Promise<void> } {
  const clients = new Map<string, Promise<pg.Client>>();
  const client = (server: string) => {
    let c = clients.get(server);
    if (!c) {
      c = connectServer(config, server, { applicationName, connectTimeoutMs: 5000, requireAll: false });
      clients.set(server, c);
      c.catch(() => clients.delete(server));
    }
    return c;
  };
  return {
    servers: Object.keys(config.servers),
    async use(server, fn) {
      return fn(await client(server));
    },
    async close() {
      const all = await Promise.allSettled(clients.values());
      await Promise.all(
        all.map((r) => (r.status === 'fulfilled' ? r.value.end().catch(() => {}) : undefined)),
      );
    },
  };
}

/**
 * The cluster's identity, from its catalog, or null when it has none yet (no transaction across servers was ever
 * prepared). Never creates it: commands that only read or settle have nothing to do without one.
 */
export async function clusterIdOf(access: ServerAccess, catalog: string): Promise<string | null> {
  const exists = await access
    .use(catalog, (c) => catalogHasCluster(c))
    .catch((error: unknown) => {
      const e = wrapPgError(error);
      throw new ShardflakeError(e.code, `catalog server ${catalog}: ${e.message}`, {
        sqlState: e.sqlState,
        cause: error,
      });
    });
  if (!exists)
    throw new ShardflakeError(
      'INVALID_CONFIG',
      `the catalog on server ${catalog} holds no cluster; run cluster init first`,
    );
  return access.use(catalog, (c) => readClusterId(c, { create: false }));
}

export interface RecoverOptions {
  /** A prepared transaction without a decision is rolled back once this old (default 5 000 ms). */
  inDoubtAfterMs?: number;
}

/** `shardflake cluster recover`: settles every in-doubt transaction of the cluster it can. */
export async function recoverCluster(
  config: Pick<ClusterConfig, 'servers' | 'nodes' | 'catalog'>,
  options: RecoverOptions = {},
): Promise<RecoveryReport> {
  const access = clusterAccess(config, 'shardflake recover');
  try {
    const id = await clusterIdOf(access, config.catalog);
    if (id === null) return { committed: [], rolledBack: [], waiting: [], unreachable: [], cleaned: 0 };
    return await recoverTransactions(access, id, {
      inDoubtAfterMs: options.inDoubtAfterMs ?? TRANSACTION_DEFAULTS.inDoubtAfterMs,
    });
  } finally {
    await access.close();
  }
}

export interface TwoPhaseCapability {
  server: string;
  /** null when the server did not answer. */
  maxPreparedTransactions: number | null;
  error?: ShardflakeError;
}

/** Each server's max_prepared_transactions (0: it cannot take part in a transaction across servers). */
export async function twoPhaseCapability(access: ServerAccess): Promise<TwoPhaseCapability[]> {
  return Promise.all(
    access.servers.map(async (server) => {
      try {
        const { rows } = await access.use(server, (c) =>
          c.query(`SELECT current_setting('max_prepared_transactions')::int AS n`),
        );
        return { server, maxPreparedTransactions: (rows[0] as { n: number }).n };
      } catch (error) {
        return { server, maxPreparedTransactions: null, error: wrapPgError(error) };
      }
    }),
  );
}

export interface TransactionsStatus {
  /** Servers whose max_prepared_transactions is 0: transactions across servers cannot include them. */
  cannotTakePart: string[];
  /** This cluster's prepared transactions now, with what their decision servers say. */
  inDoubt: {
    gid: string;
    server: string;
    txid: string;
    decisionServer: string;
    ageMs: number;
    decision: InDoubtGid['decision'];
  }[];
}

/** The transactions part of `cluster status` (and the dashboard): read only. */
export async function transactionsStatus(access: ServerAccess, catalog: string): Promise<TransactionsStatus> {
  const [capability, id] = await Promise.all([
    twoPhaseCapability(access),
    clusterIdOf(access, catalog).catch(() => null),
  ]);
  const listed = id === null ? { inDoubt: [] } : await listInDoubt(access, id);
  return {
    cannotTakePart: capability.filter((c) => c.maxPreparedTransactions === 0).map((c) => c.server),
    inDoubt: listed.inDoubt.map((g) => ({
      gid: g.gid,
      server: g.server,
      txid: g.txid,
      decisionServer: g.decisionServer,
      ageMs: Math.round(g.ageMs),
      decision: g.decision,
    })),
  };
}

/** The transactions part of `cluster status` over the servers that answered (status reports the others). */
export async function readTransactionsStatus(
  config: Pick<ClusterConfig, 'servers' | 'nodes' | 'catalog'>,
  reachable: readonly string[],
): Promise<TransactionsStatus> {
  const access = clusterAccess(config, 'shardflake status');
  try {
    return await transactionsStatus({ servers: reachable, use: access.use }, config.catalog);
  } finally {
    await access.close();
  }
}
