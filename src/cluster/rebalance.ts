import { ShardflakeError } from '../errors.js';
import { connect, wrapPgError } from '../postgres/connect.js';
import { readShardMap, type ShardPlacement } from './catalog.js';
import type { ClusterConfig } from './config.js';
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

export interface RebalanceOptions {
  dryRun?: boolean;
  /** Called before each move and after the last one. */
  onProgress?: (done: number, total: number, next?: PlannedMove) => void;
  move?: MoveOptions;
}

export interface RebalanceResult extends RebalancePlan {
  dryRun: boolean;
  results: MoveResult[];
}

export async function rebalanceCluster(
  config: ClusterConfig,
  options: RebalanceOptions = {},
): Promise<RebalanceResult> {
  const catalogUrl = config.servers[config.catalog] as string;
  const catalog = await connect(catalogUrl, { applicationName: 'shardflake rebalance' });
  let shards: ShardPlacement[];
  try {
    shards = (await readShardMap(catalog)).shards;
  } catch (error) {
    throw wrapPgError(error, catalogUrl);
  } finally {
    await catalog.end().catch(() => {});
  }
  if (shards.length === 0)
    throw new ShardflakeError('INVALID_CONFIG', 'the shard map is empty; run cluster init first');
  const plan = planRebalance(shards, Object.keys(config.servers));
  const results: MoveResult[] = [];
  if (!options.dryRun) {
    for (const [i, m] of plan.moves.entries()) {
      options.onProgress?.(i, plan.moves.length, m);
      results.push(await moveShard(config, m.shard, m.to, options.move));
    }
    options.onProgress?.(plan.moves.length, plan.moves.length);
  }
  return { ...plan, dryRun: options.dryRun === true, results };
}
