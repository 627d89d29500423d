import type pg from 'pg';
import { finishedStreams } from '../catalog/moves.js';
import { readShardMap, type ShardPlacement } from '../catalog/shards.js';
import type { ClusterConfig } from '../config/config.js';
import { isShardflakeError, ShardflakeError } from '../errors/errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { quoteIdent } from '../postgres/identifier.js';
import { connectServer } from '../topology/connections.js';
import { checkSetOptions } from './checks.js';
import { moveSets } from './engine.js';
import type { MoveResult, SetMoveOptions } from './options.js';

/**
 * `cluster rebalance`: spreads the logical shards evenly over the servers the config names, e.g. after a third
 * server was added. Shard counts are what gets evened out (every logical shard gets the same share of keys, so
 * counts are the right measure for modulo and hash routing); the plan is the smallest set of moves that leaves
 * every server within one shard of every other. Which shards go: the highest-numbered ones of each crowded
 * server, so a rerun after an interruption plans the same remaining moves.
 */
export interface PlannedMove {
  /** The logical shard to move. */
  shard: number;
  /** The server that holds the shard now. */
  from: string;
  /** The server the plan sends the shard to. */
  to: string;
}

/** A rebalance plan: shards per server before and after, and the moves that get there. */
export interface RebalancePlan {
  /** Shards each server of the config holds now, by server name. */
  before: Record<string, number>;
  /** Shards each server holds once the plan's moves are done (0 for a decommissioned one). */
  after: Record<string, number>;
  /** The moves, by shard number; empty when the servers are already balanced. */
  moves: PlannedMove[];
}

/** Options of `planRebalance`. */
export interface PlanOptions {
  /** Servers to empty: every shard they hold moves to the others, and they receive none. */
  decommission?: readonly string[];
}

/** The servers that keep or receive shards; refuses a decommission that would leave none. */
function remainingServers(servers: readonly string[], decommission: readonly string[] = []): string[] {
  for (const d of decommission) {
    if (!servers.includes(d)) {
      throw new ShardflakeError(
        'UNKNOWN_SERVER',
        `cannot decommission server ${JSON.stringify(d)}: the config does not define it (servers: ${servers.join(', ')})`,
      );
    }
  }
  const remaining = servers.filter((s) => !decommission.includes(s));
  if (remaining.length === 0) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      servers.length === 0
        ? 'rebalance needs at least one server'
        : `decommissioning ${decommission.join(', ')} would leave no server for the shards; add a server to the config first`,
    );
  }
  return remaining;
}

function unknownHome(shard: number, server: string): ShardflakeError {
  return new ShardflakeError(
    'UNKNOWN_SERVER',
    `shard ${shard} lives on server ${server}, which the config does not define; add it back to the config to move its shards away`,
  );
}

/**
 * The fewest moves that leave every server within one shard of the others (decommissioned servers emptied), taking
 * the highest-numbered shards of crowded servers, so an interrupted rebalance replans the same remaining moves.
 */
export function planRebalance(
  shards: readonly Pick<ShardPlacement, 'shard' | 'server'>[],
  servers: readonly string[],
  options: PlanOptions = {},
): RebalancePlan {
  if (servers.length === 0)
    throw new ShardflakeError('INVALID_CONFIG', 'rebalance needs at least one server');
  const remaining = remainingServers(servers, options.decommission);
  const held = new Map<string, number[]>(servers.map((s) => [s, []]));
  for (const p of shards) {
    const list = held.get(p.server);
    if (!list) throw unknownHome(p.shard, p.server);
    list.push(p.shard);
  }
  for (const list of held.values()) list.sort((a, b) => a - b);
  const before = Object.fromEntries([...held].map(([s, l]) => [s, l.length]));
  // Servers in config order; the first (N mod K) servers keep one extra shard, so the plan is deterministic.
  const base = Math.floor(shards.length / remaining.length);
  const extra = shards.length % remaining.length;
  // Crowded servers keep their extra shard first, so fewer shards move.
  const order = [...remaining].sort(
    (a, b) =>
      (held.get(b)?.length ?? 0) - (held.get(a)?.length ?? 0) || servers.indexOf(a) - servers.indexOf(b),
  );
  const quota = new Map<string, number>(servers.map((s) => [s, 0]));
  order.forEach((s, i) => {
    quota.set(s, base + (i < extra ? 1 : 0));
  });
  const surplus: PlannedMove[] = [];
  for (const s of servers) {
    const list = held.get(s) as number[];
    const over = list.length - (quota.get(s) as number);
    for (const shard of list.slice(list.length - Math.max(0, over))) surplus.push({ shard, from: s, to: '' });
  }
  const moves: PlannedMove[] = [];
  for (const s of remaining) {
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
 * Balancing by a weight per shard (rows, bytes on disk, or the user's own SQL): first every shard of a
 * decommissioned server goes, heaviest first, to the least loaded remaining server; then, greedily, each step
 * moves one shard from the most loaded server to the least loaded one, choosing the shard whose weight is closest
 * to half the gap (which narrows the gap most), and stops when no shard would narrow it. Each shard moves at most
 * once. For clusters whose shards grew unevenly (big tenants).
 */
export function planRebalanceByWeight(
  shards: readonly (Pick<ShardPlacement, 'shard' | 'server'> & { weight: number })[],
  servers: readonly string[],
  options: PlanOptions = {},
): RebalancePlan & {
  /** Each server's summed shard weight before the moves, decommissioned servers included. */
  weightBefore: Record<string, number>;
  /** Each server's summed shard weight once the plan's moves are done. */
  weightAfter: Record<string, number>;
} {
  const remaining = remainingServers(servers, options.decommission);
  const home = new Map<number, string>();
  const load = new Map<string, number>(servers.map((s) => [s, 0]));
  for (const p of shards) {
    if (!load.has(p.server)) throw unknownHome(p.shard, p.server);
    home.set(p.shard, p.server);
    load.set(p.server, (load.get(p.server) as number) + p.weight);
  }
  const count = (where: Map<number, string>) =>
    Object.fromEntries(servers.map((s) => [s, [...where.values()].filter((h) => h === s).length]));
  const before = count(home);
  const weightBefore = Object.fromEntries(load);
  const moved = new Set<number>();
  const moves: PlannedMove[] = [];
  const lightest = () =>
    [...remaining].sort(
      (a, b) => (load.get(a) as number) - (load.get(b) as number) || servers.indexOf(a) - servers.indexOf(b),
    )[0] as string;
  const leaving = shards
    .filter((p) => !remaining.includes(p.server))
    .sort((a, b) => b.weight - a.weight || a.shard - b.shard);
  for (const p of leaving) {
    const to = lightest();
    moved.add(p.shard);
    home.set(p.shard, to);
    load.set(p.server, (load.get(p.server) as number) - p.weight);
    load.set(to, (load.get(to) as number) + p.weight);
    moves.push({ shard: p.shard, from: p.server, to });
  }
  for (let step = 0; step < shards.length; step++) {
    const ordered = remaining
      .map((s) => [s, load.get(s) as number] as const)
      .sort((a, b) => b[1] - a[1] || servers.indexOf(a[0]) - servers.indexOf(b[0]));
    const [heavy, heavyLoad] = ordered[0] as readonly [string, number];
    const [light, lightLoad] = ordered[ordered.length - 1] as readonly [string, number];
    const gap = heavyLoad - lightLoad;
    let best: { shard: number; weight: number } | undefined;
    for (const p of shards) {
      if (home.get(p.shard) !== heavy || moved.has(p.shard) || p.weight <= 0 || p.weight >= gap) continue;
      if (!best || Math.abs(p.weight - gap / 2) < Math.abs(best.weight - gap / 2)) best = p;
    }
    if (!best) break;
    moved.add(best.shard);
    home.set(best.shard, light);
    load.set(heavy, heavyLoad - best.weight);
    load.set(light, lightLoad + best.weight);
    moves.push({ shard: best.shard, from: heavy, to: light });
  }
  moves.sort((a, b) => a.shard - b.shard);
  return { before, after: count(home), moves, weightBefore, weightAfter: Object.fromEntries(load) };
}

/** Balancing by rows: `planRebalanceByWeight` with each shard's row count as its weight. */
export function planRebalanceByRows(
  shards: readonly (Pick<ShardPlacement, 'shard' | 'server'> & { rows: number })[],
  servers: readonly string[],
  options: PlanOptions = {},
): RebalancePlan & {
  /** Each server's rows (the counts given) before the moves. */
  rowsBefore: Record<string, number>;
  /** Each server's rows once the plan's moves are done. */
  rowsAfter: Record<string, number>;
} {
  const plan = planRebalanceByWeight(
    shards.map((p) => ({ ...p, weight: p.rows })),
    servers,
    options,
  );
  return {
    before: plan.before,
    after: plan.after,
    moves: plan.moves,
    rowsBefore: plan.weightBefore,
    rowsAfter: plan.weightAfter,
  };
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

/** Bytes on disk per shard schema: tables with their indexes and TOAST (pg_total_relation_size). */
export async function shardByteSizes(
  config: ClusterConfig,
  placements: readonly ShardPlacement[],
): Promise<Map<number, number>> {
  return perServer(config, placements, async (client, list) => {
    const { rows } = await client.query(
      `SELECT n.nspname AS schema, sum(pg_total_relation_size(c.oid))::float8 AS n
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY($1::text[]) AND c.relkind IN ('r', 'p') GROUP BY 1`,
      [list.map((p) => p.schema)],
    );
    return new Map((rows as { schema: string; n: number }[]).map((r) => [r.schema, r.n]));
  });
}

/**
 * The user's weight of each shard: `sql` runs once per shard schema, in a READ ONLY transaction whose search_path
 * is that schema alone (quoted, never spliced), as a single statement (the extended protocol refuses several) that
 * must return one row with one number, e.g. `SELECT count(*) FROM photos WHERE created_at > now() - interval '30
 * days'`. Trusted input: READ ONLY does not stop functions with side effects, and it runs as the config's role
 * (docs/security.md).
 */
export async function shardUserWeights(
  config: ClusterConfig,
  placements: readonly ShardPlacement[],
  sql: string,
): Promise<Map<number, number>> {
  if (sql.trim() === '') throw new ShardflakeError('INVALID_ARGUMENT', '--weight-sql is empty');
  return perServer(config, placements, async (client, list) => {
    const weights = new Map<string, number>();
    for (const p of list) {
      await client.query('BEGIN READ ONLY');
      try {
        await client.query(`SET LOCAL search_path TO ${quoteIdent(p.schema, 'schema')}`);
        const { rows, fields } = await client.query({ text: sql, queryMode: 'extended' } as pg.QueryConfig);
        const value =
          rows.length === 1 && fields.length === 1 ? Number(Object.values(rows[0])[0]) : Number.NaN;
        if (!Number.isFinite(value) || value < 0) {
          throw new ShardflakeError(
            'INVALID_ARGUMENT',
            `--weight-sql must return one row with one number of at least 0 per shard; in ${p.schema} it returned ${rows.length} row(s) of ${fields.length} column(s)${rows.length === 1 ? ` (${JSON.stringify(String(Object.values(rows[0])[0]))})` : ''}`,
          );
        }
        weights.set(p.schema, value);
      } catch (error) {
        if (isShardflakeError(error)) throw error;
        const e = wrapPgError(error);
        throw new ShardflakeError(
          'INVALID_ARGUMENT',
          `--weight-sql failed in shard schema ${p.schema}: ${e.message}`,
          {
            sqlState: e.sqlState,
            cause: error,
          },
        );
      } finally {
        await client.query('ROLLBACK').catch(() => {});
      }
    }
    return weights;
  });
}

/** Runs `measure` once per server on that server's shards; returns a value per shard (0 where none came back). */
async function perServer(
  config: ClusterConfig,
  placements: readonly ShardPlacement[],
  measure: (client: pg.Client, list: ShardPlacement[]) => Promise<Map<string, number>>,
): Promise<Map<number, number>> {
  const values = new Map<number, number>();
  for (const server of new Set(placements.map((p) => p.server))) {
    if (!(server in config.servers)) continue;
    const list = placements.filter((p) => p.server === server);
    const client = await connectServer(config, server, { applicationName: 'shardflake rebalance' });
    try {
      const bySchema = await measure(client, list);
      for (const p of list) values.set(p.shard, bySchema.get(p.schema) ?? 0);
    } catch (error) {
      throw isShardflakeError(error) ? error : wrapPgError(error);
    } finally {
      await client.end().catch(() => {});
    }
  }
  return values;
}

/** What a rebalance evens out: shard counts, live rows, bytes on disk, or a weight of your own (`weightSql`). */
export const BALANCE_BY = ['shards', 'rows', 'bytes', 'weight'] as const;
export type BalanceBy = (typeof BALANCE_BY)[number];

/** Options of `rebalanceCluster`: what to balance, servers to empty, whether to only plan, and how the moves run. */
export interface RebalanceOptions {
  /** Even out shard counts (default), live rows, bytes on disk, or `weightSql`'s value per shard. */
  by?: BalanceBy;
  /** With `by: 'weight'` (implied when given): SQL run in each shard schema returning its weight. */
  weightSql?: string;
  /** Servers to empty (every shard moves off them). */
  decommission?: readonly string[];
  /** Only plan and estimate: no shard moves and `results` is empty (default false). */
  dryRun?: boolean;
  /** Called as shards switch: how many of the plan's moves are done. */
  onProgress?: (done: number, total: number) => void;
  /** How the moves run (sets per server pair, streams per server, throttle, …). */
  move?: SetMoveOptions;
}

/**
 * What `rebalanceCluster` planned and, unless it was a dry run, did: the plan, the balanced quantity per server
 * before and after, the estimate and the moves' results.
 */
export interface RebalanceResult extends RebalancePlan {
  /** What was balanced: the `by` option, `weight` when `weightSql` was given, else `shards`. */
  by: BalanceBy;
  /** With `by: 'rows'`: estimated rows per server before the moves. */
  rowsBefore?: Record<string, number>;
  /** With `by: 'rows'`: estimated rows per server once the moves are done. */
  rowsAfter?: Record<string, number>;
  /** With `by` other than shards: the balanced quantity per server before the moves. */
  weightBefore?: Record<string, number>;
  /** With `by` other than shards: the balanced quantity per server once the moves are done. */
  weightAfter?: Record<string, number>;
  /** The servers emptied, as asked (duplicates removed); empty when none. */
  decommission: string[];
  /** Rows the plan copies (live-row estimates). */
  rowsToCopy: number;
  /** Estimated time of the plan, from the durations of earlier moves in this cluster (null: none measured yet). */
  estimate: MoveEstimate | null;
  /** True when the rebalance only planned (the `dryRun` option): nothing moved. */
  dryRun: boolean;
  /** One result per planned move, in the plan's order; empty for a dry run or an empty plan. */
  results: MoveResult[];
}

/**
 * How long a plan should take, from the moves this cluster recorded earlier: a fit `time = shards × a + rows × b`
 * with a, b ≥ 0, held between bounds the history measured (`estimateMoves` says which).
 */
export interface MoveEstimate {
  /** The plan's estimated duration in seconds: the fit, held between `low` and `high`. */
  seconds: number;
  /** The least the history allows: its fastest set, scaled by whichever of shards or rows grew less. */
  low: number;
  /** The most the history allows: its slowest set, scaled by whichever of shards or rows grew more. */
  high: number;
  /** The fitted fixed cost of moving one shard, in seconds, whatever its rows (never negative). */
  secondsPerShard: number;
  /** The fitted copy rate in rows per second; 0 when the history shows no cost per row. */
  rowsPerSecond: number;
  /** How many finished sets and single moves in the catalog the fit used. */
  fromSets: number;
  /**
   * True when the history is too thin to trust the fit: fewer than three sets, or a plan over ten times the
   * largest set measured. Then `low`–`high` is the answer to show, not `seconds`.
   */
  thin: boolean;
}

/** A finished set (or single move) as the estimate reads it: its shards, rows copied and seconds taken. */
export interface MeasuredSet {
  shards: number;
  rows: number;
  seconds: number;
}

/**
 * A set's time runs from its start to its last phase, so one that was interrupted and resumed hours later (a
 * killed CLI, a fault drill) counts the hours in between. Sets taking more than ten times the median time per
 * shard are left out of the fit when there are at least three to take the median of.
 */
export function withoutInterruptions<T extends { shards: number; seconds: number }>(sets: readonly T[]): T[] {
  if (sets.length < 3) return [...sets];
  const perShard = sets.map((h) => h.seconds / Math.max(1, h.shards)).sort((x, y) => x - y);
  const median = perShard[Math.floor(perShard.length / 2)] as number;
  return sets.filter((h) => h.seconds / Math.max(1, h.shards) <= 10 * Math.max(median, 0.001));
}

/**
 * Least squares for `t = s·a + r·b` with a, b ≥ 0 (two unknowns, so the non-negative solution is one of: the free
 * fit when both come out ≥ 0, else the better of the two one-coefficient fits). The free fit alone is what printed
 * 15,206 s for a 28.5 s rebalance: a single-shard move with a fixed cost beside a large set made b negative, and
 * clamping b to 0 afterwards kept the a that the negative b had inflated.
 */
function nonNegativeFit(sets: readonly MeasuredSet[]): { a: number; b: number } {
  let ss = 0;
  let sr = 0;
  let rr = 0;
  let st = 0;
  let rt = 0;
  for (const h of sets) {
    ss += h.shards * h.shards;
    sr += h.shards * h.rows;
    rr += h.rows * h.rows;
    st += h.shards * h.seconds;
    rt += h.rows * h.seconds;
  }
  const det = ss * rr - sr * sr;
  if (det > 1e-9 * ss * rr) {
    const a = (st * rr - rt * sr) / det;
    const b = (ss * rt - sr * st) / det;
    if (a >= 0 && b >= 0) return { a, b };
  }
  // Residual sums of squares of the one-coefficient fits: Σt² − (Σxt)²/Σx², so the larger (Σxt)²/Σx² wins.
  const shardsOnly = ss > 0 ? { a: Math.max(0, st / ss), b: 0, explained: (st * st) / ss } : undefined;
  const rowsOnly = rr > 0 ? { a: 0, b: Math.max(0, rt / rr), explained: (rt * rt) / rr } : undefined;
  const best =
    shardsOnly && rowsOnly ? (rowsOnly.explained > shardsOnly.explained ? rowsOnly : shardsOnly) : shardsOnly;
  return best ? { a: best.a, b: best.b } : { a: 0, b: 0 };
}

/**
 * The estimate for a plan of `shards` shards and `rows` rows from finished sets (interrupted ones already left
 * out). What it guarantees, whatever the history (durations ≥ 0, sets of ≥ 1 shard):
 *
 * - `0 ≤ low ≤ seconds ≤ high`, all finite;
 * - `low` = the least over the sets of `seconds_h × min(shards / shards_h, rows / rows_h)` and `high` = the most
 *   of `seconds_h × max(shards / shards_h, rows / rows_h)` (a set without rows scales by shards alone): each set
 *   scaled up to the plan, once as if all its time were per shard and once as if all were per row. When the
 *   history really is `shards × a + rows × b` the fit lies inside these already, so the bounds only bite on
 *   noise — and then they keep the answer within what some measured set's own rate would predict.
 *
 * Null when nothing was measured.
 */
export function estimateMoves(
  history: readonly MeasuredSet[],
  shards: number,
  rows: number,
): MoveEstimate | null {
  const sets = history.filter((h) => h.shards >= 1 && Number.isFinite(h.seconds) && h.seconds >= 0);
  if (sets.length === 0) return null;
  let low = Number.POSITIVE_INFINITY;
  let high = 0;
  for (const h of sets) {
    const byShards = shards / h.shards;
    const byRows = h.rows > 0 ? rows / h.rows : byShards;
    low = Math.min(low, h.seconds * Math.min(byShards, byRows));
    high = Math.max(high, h.seconds * Math.max(byShards, byRows));
  }
  const { a, b } = nonNegativeFit(sets);
  const fitted = Math.min(high, Math.max(low, a * shards + b * rows));
  const largest = Math.max(...sets.map((h) => h.shards));
  const round = (x: number) => Math.round(x * 10) / 10;
  return {
    seconds: round(fitted),
    low: round(low),
    high: round(high),
    secondsPerShard: Math.round(a * 1000) / 1000,
    rowsPerSecond: b > 0 ? Math.round(1 / b) : 0,
    fromSets: sets.length,
    thin: sets.length < 3 || shards > 10 * largest,
  };
}

/**
 * The estimate for a plan, from the finished sets (and single moves) in the catalog's move records. A set's time
 * is from its first start to its last update; the sets of a plan that ran side by side each count their own time.
 */
export async function estimateFromHistory(
  catalog: pg.Client,
  shards: number,
  rows: number,
): Promise<MoveEstimate | null> {
  return estimateMoves(withoutInterruptions(await finishedStreams(catalog).catch(() => [])), shards, rows);
}

/**
 * Plans a rebalance over the config's servers and runs it as sets of shards, one set per server pair, sets of
 * distinct pairs side by side (`shardflake cluster rebalance`); with `dryRun` it only plans.
 */
export async function rebalanceCluster(
  config: ClusterConfig,
  options: RebalanceOptions = {},
): Promise<RebalanceResult> {
  const by: BalanceBy = options.weightSql !== undefined ? 'weight' : (options.by ?? 'shards');
  if (by === 'weight' && options.weightSql === undefined) {
    throw new ShardflakeError('INVALID_ARGUMENT', 'balancing by weight needs --weight-sql');
  }
  const servers = Object.keys(config.servers);
  const decommission = [...new Set(options.decommission ?? [])];
  const planOptions = { decommission };
  remainingServers(servers, decommission);
  if (options.move) checkSetOptions(options.move);
  const catalog = await connectServer(config, config.catalog, { applicationName: 'shardflake rebalance' });
  let shards: ShardPlacement[];
  try {
    shards = (await readShardMap(catalog)).shards;
  } catch (error) {
    await catalog.end().catch(() => {});
    throw wrapPgError(error);
  }
  try {
    if (shards.length === 0)
      throw new ShardflakeError('INVALID_CONFIG', 'the shard map is empty; run cluster init first');
    const rows = await shardRowEstimates(config, shards);
    let plan: RebalancePlan &
      Partial<Pick<RebalanceResult, 'rowsBefore' | 'rowsAfter' | 'weightBefore' | 'weightAfter'>>;
    if (by === 'shards') plan = planRebalance(shards, servers, planOptions);
    else if (by === 'rows') {
      const byRows = planRebalanceByRows(
        shards.map((p) => ({ ...p, rows: rows.get(p.shard) ?? 0 })),
        servers,
        planOptions,
      );
      plan = { ...byRows, weightBefore: byRows.rowsBefore, weightAfter: byRows.rowsAfter };
    } else {
      const weights =
        by === 'bytes'
          ? await shardByteSizes(config, shards)
          : await shardUserWeights(config, shards, options.weightSql as string);
      plan = planRebalanceByWeight(
        shards.map((p) => ({ ...p, weight: weights.get(p.shard) ?? 0 })),
        servers,
        planOptions,
      );
    }
    const rowsToCopy = plan.moves.reduce((n, m) => n + (rows.get(m.shard) ?? 0), 0);
    const estimate = await estimateFromHistory(catalog, plan.moves.length, rowsToCopy);
    let results: MoveResult[] = [];
    if (!options.dryRun && plan.moves.length > 0) {
      // One set per (source, target) pair, pairs side by side; progress counts switched shards over all sets.
      const switched = new Map<string, number>();
      options.onProgress?.(0, plan.moves.length);
      results = await moveSets(
        config,
        plan.moves.map((m) => ({ shard: m.shard, to: m.to })),
        {
          ...options.move,
          onSetProgress: (p) => {
            options.move?.onSetProgress?.(p);
            if (p.phase !== 'switching') return;
            switched.set(`${p.from}>${p.to}`, p.done);
            options.onProgress?.(
              [...switched.values()].reduce((n, d) => n + d, 0),
              plan.moves.length,
            );
          },
        },
      );
      options.onProgress?.(plan.moves.length, plan.moves.length);
    }
    return { ...plan, by, decommission, rowsToCopy, estimate, dryRun: options.dryRun === true, results };
  } finally {
    await catalog.end().catch(() => {});
  }
}
