import { readShardMap, type ShardPlacement } from '../cluster/catalog.js';
import type { ClusterConfig } from '../cluster/config.js';
import { connectServer } from '../cluster/connections.js';
import { ShardflakeError } from '../errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { type MoveOptions, type MoveResult, moveShard } from './move.js';

/**
 * `cluster rebalance`: spreads the logical shards evenly over the servers the config names, e.g. after a third
 * server was added. Shard counts are what gets evened out (every logical shard gets the same share of keys, so
 * counts are the right measure for modulo and hash routing); the plan is the smallest set of moves that leaves
 * every server within one shard of every other. Which shards go: the highest-numbered ones of each crowded
 * server, so a rerun after an interruption plans the same remaining moves.
 */
export interface PlannedMove {
  shard: number;
  from: string;
  to: string;
}

export interface RebalancePlan {
  before: Record<string, number>;
  after: Record<string, number>;
  moves: PlannedMove[];
}

export function planRebalance(
  shards: readonly Pick<ShardPlacement, 'shard' | 'server'>[],
  servers: readonly string[],
): RebalancePlan {
  if (servers.length === 0)
    throw new ShardflakeError('INVALID_CONFIG', 'rebalance needs at least one server');
  const held = new Map<string, number[]>(servers.map((s) => [s, []]));
  for (const p of shards) {
    const list = held.get(p.server);
    if (!list) {
      throw new ShardflakeError(
        'UNKNOWN_SERVER',
        `shard ${p.shard} lives on server ${p.server}, which the config does not define; add it back to the config to move its shards away`,
      );
    }
    list.push(p.shard);
  }
  for (const list of held.values()) list.sort((a, b) => a - b);
  const before = Object.fromEntries([...held].map(([s, l]) => [s, l.length]));
  // Servers in config order; the first (N mod K) servers keep one extra shard, so the plan is deterministic.
  const base = Math.floor(shards.length / servers.length);
  const extra = shards.length % servers.length;
  // Crowded servers keep their extra shard first, so fewer shards move.
  const order = [...servers].sort(
    (a, b) =>
      (held.get(b)?.length ?? 0) - (held.get(a)?.length ?? 0) || servers.indexOf(a) - servers.indexOf(b),
  );
  const quota = new Map(order.map((s, i) => [s, base + (i < extra ? 1 : 0)]));
  const surplus: PlannedMove[] = [];
  for (const s of servers) {
    const list = held.get(s) as number[];
    const over = list.length - (quota.get(s) as number);
    for (const shard of list.slice(list.length - Math.max(0, over))) surplus.push({ shard, from: s, to: '' });
  }
  const moves: PlannedMove[] = [];
  for (const s of servers) {
    let missing = (quota.get(s) as number) - (held.get(s) as number[]).length;
    while (missing-- > 0) {
      const m = surplus.shift();
      if (!m) break;
      moves.push({ ...m, to: s });
    }
  }
  moves.sort((a, b) => a.shard - b.shard);
  const after = { ...before };
  for (const m of moves) {
    after[m.from] = (after[m.from] as number) - 1;
    after[m.to] = (after[m.to] as number) + 1;
  }
  return { before, after, moves };
}

/**
 * Balancing by rows instead: greedy, each step moves one shard from the most loaded server to the least loaded
 * one, choosing the shard whose size is closest to half the gap (which narrows the gap most), and stops when no
 * shard would narrow it. Each shard moves at most once. For clusters whose shards grew unevenly (big tenants).
 */
export function planRebalanceByRows(
  shards: readonly (Pick<ShardPlacement, 'shard' | 'server'> & { rows: number })[],
  servers: readonly string[],
): RebalancePlan & { rowsBefore: Record<string, number>; rowsAfter: Record<string, number> } {
  const home = new Map<number, string>();
  const load = new Map<string, number>(servers.map((s) => [s, 0]));
  for (const p of shards) {
    if (!load.has(p.server)) {
      throw new ShardflakeError(
        'UNKNOWN_SERVER',
        `shard ${p.shard} lives on server ${p.server}, which the config does not define; add it back to the config to move its shards away`,
      );
    }
    home.set(p.shard, p.server);
    load.set(p.server, (load.get(p.server) as number) + p.rows);
  }
  const count = (where: Map<number, string>) =>
    Object.fromEntries(servers.map((s) => [s, [...where.values()].filter((h) => h === s).length]));
  const before = count(home);
  const rowsBefore = Object.fromEntries(load);
  const moved = new Set<number>();
  const moves: PlannedMove[] = [];
  for (let step = 0; step < shards.length; step++) {
    const ordered = [...load].sort((a, b) => b[1] - a[1] || servers.indexOf(a[0]) - servers.indexOf(b[0]));
    const [heavy, heavyLoad] = ordered[0] as [string, number];
    const [light, lightLoad] = ordered[ordered.length - 1] as [string, number];
    const gap = heavyLoad - lightLoad;
    let best: { shard: number; rows: number } | undefined;
    for (const p of shards) {
      if (home.get(p.shard) !== heavy || moved.has(p.shard) || p.rows <= 0 || p.rows >= gap) continue;
      if (!best || Math.abs(p.rows - gap / 2) < Math.abs(best.rows - gap / 2)) best = p;
    }
    if (!best) break;
    moved.add(best.shard);
    home.set(best.shard, light);
    load.set(heavy, heavyLoad - best.rows);
    load.set(light, lightLoad + best.rows);
    moves.push({ shard: best.shard, from: heavy, to: light });
  }
  moves.sort((a, b) => a.shard - b.shard);
  return { before, after: count(home), moves, rowsBefore, rowsAfter: Object.fromEntries(load) };
}

/** Live row estimates per shard schema (pg_stat_user_tables.n_live_tup, summed over the schema's tables). */
export async function shardRowEstimates(
  config: ClusterConfig,
  placements: readonly ShardPlacement[],
): Promise<Map<number, number>> {
  const rows = new Map<number, number>();
  for (const server of new Set(placements.map((p) => p.server))) {
    if (!(server in config.servers)) continue;
    const client = await connectServer(config, server, { applicationName: 'shardflake rebalance' });
    try {
      const { rows: found } = await client.query(
        'SELECT schemaname AS schema, sum(n_live_tup)::float8 AS n FROM pg_stat_user_tables WHERE schemaname = ANY($1) GROUP BY 1',
        [placements.filter((p) => p.server === server).map((p) => p.schema)],
      );
      const bySchema = new Map((found as { schema: string; n: number }[]).map((r) => [r.schema, r.n]));
      for (const p of placements) if (p.server === server) rows.set(p.shard, bySchema.get(p.schema) ?? 0);
    } catch (error) {
      throw wrapPgError(error);
    } finally {
      await client.end().catch(() => {});
    }
  }
  return rows;
}

export const BALANCE_BY = ['shards', 'rows'] as const;
export type BalanceBy = (typeof BALANCE_BY)[number];

export interface RebalanceOptions {
  /** Even out shard counts (default) or row counts. */
  by?: BalanceBy;
  dryRun?: boolean;
  /** Called before each move and after the last one. */
  onProgress?: (done: number, total: number, next?: PlannedMove) => void;
  move?: MoveOptions;
}

export interface RebalanceResult extends RebalancePlan {
  by: BalanceBy;
  /** With `by: 'rows'`: estimated rows per server before and after. */
  rowsBefore?: Record<string, number>;
  rowsAfter?: Record<string, number>;
  dryRun: boolean;
  results: MoveResult[];
}

export async function rebalanceCluster(
  config: ClusterConfig,
  options: RebalanceOptions = {},
): Promise<RebalanceResult> {
  const catalog = await connectServer(config, config.catalog, { applicationName: 'shardflake rebalance' });
  let shards: ShardPlacement[];
  try {
    shards = (await readShardMap(catalog)).shards;
  } catch (error) {
    throw wrapPgError(error);
  } finally {
    await catalog.end().catch(() => {});
  }
  if (shards.length === 0)
    throw new ShardflakeError('INVALID_CONFIG', 'the shard map is empty; run cluster init first');
  const servers = Object.keys(config.servers);
  let plan: RebalancePlan & { rowsBefore?: Record<string, number>; rowsAfter?: Record<string, number> };
  if (options.by === 'rows') {
    const estimates = await shardRowEstimates(config, shards);
    plan = planRebalanceByRows(
      shards.map((p) => ({ ...p, rows: estimates.get(p.shard) ?? 0 })),
      servers,
    );
  } else {
    plan = planRebalance(shards, servers);
  }
  const results: MoveResult[] = [];
  if (!options.dryRun) {
    for (const [i, m] of plan.moves.entries()) {
      options.onProgress?.(i, plan.moves.length, m);
      results.push(await moveShard(config, m.shard, m.to, options.move));
    }
    options.onProgress?.(plan.moves.length, plan.moves.length);
  }
  return { ...plan, by: options.by ?? 'shards', dryRun: options.dryRun === true, results };
}
