import type pg from 'pg';
import { readPlacements } from '../catalog/shards.js';
import type { Queryable } from '../postgres/connect.js';
import { fenceSchema } from './fence.js';
import { FENCE_FUNCTION } from './names.js';
import { lockShard, unlockShard } from './shard-lock.js';

/**
 * Fence on discovery: a node never serves an unfenced old copy of a shard the catalog places elsewhere.
 *
 * How such a copy can exist. A move fences the old copy on the source's primary before it switches the catalog,
 * and waits until every replica the config lists for the source has replayed the fence (move/replica-fence.ts).
 * A node the config does not list — a replica the operator's config left out, cut off from its primary when the
 * fence committed — never got it; promoted after the switch, it holds the old copy writable while the catalog
 * places the shard on the target. A write there (a router behind on the map, a script, a tool) is acknowledged
 * on a copy nobody reads.
 *
 * The rule. Before a router uses a connection to a primary for the first time, and at its start for every server
 * its config names, it checks the node (`checkNode`): every shard schema on the node that has no fence is looked
 * up in the catalog, read now (not the router's cached map); one the catalog places `active` on another server is
 * a stray, and is fenced at once. `cluster cleanup` does the same for every server (move/cleanup.ts), and then
 * keeps a stray that took writes as a conflict instead of dropping it.
 *
 * Why fencing a stray is always safe. It is done holding the shard's lock (fence/shard-lock.ts), which every
 * move holds from its start to its end, and after reading the shard's placement again under that lock. So no
 * move of the shard is running: the catalog's placement is its one home, every other copy is a leftover that no
 * client should write, and a fence on it can only turn a silent write into SF001 — which routers answer by
 * refreshing the map and writing to the home. A shard whose lock is held (a move running) is left alone: during
 * a move the copy off the catalog's server is the target, fenced by the move itself until its switch, and the
 * check only touches copies without a fence. A shard in state `moving` is left alone for the same reason (the
 * switch opens the target and then names it in the catalog; between the two, the open target is not a stray).
 *
 * What it does not cover: a node no shardflake process has connected to since its promotion. Until a router,
 * `cluster status` or `cluster cleanup` reaches it, a client writing straight to it meets no fence; list every
 * replica in the config (then the move waits for it) to close that window.
 */
export interface StrayCopy {
  shard: number;
  schema: string;
  /** The server the catalog places the shard on. */
  home: string;
}

/** What the check asks of the catalog: placements read now, and a dedicated connection for the shard's lock. */
export interface StrayCatalog {
  reader: Queryable;
  logicalShards: number;
  /** A connection of its own for the session-level shard lock (opened only when a stray is found). */
  connect(): Promise<pg.Client>;
}

/** The shard schemas of a node that have no fence (one query). */
async function unfencedShardSchemas(node: Queryable, schemaPrefix: string): Promise<Map<number, string>> {
  const { rows } = await node.query(
    `SELECT n.nspname::text AS schema FROM pg_namespace n
      WHERE n.nspname ~ ('^' || $1 || '[0-9]{4}$')
        AND NOT EXISTS (SELECT 1 FROM pg_proc p WHERE p.pronamespace = n.oid AND p.proname = $2)`,
    [schemaPrefix, FENCE_FUNCTION],
  );
  return new Map(
    (rows as { schema: string }[]).map((r) => [Number(r.schema.slice(schemaPrefix.length)), r.schema]),
  );
}

/**
 * Fences the strays on `node` (a primary of configured server `server`): returns what it fenced, and the shards it
 * left because a move of them is running.
 */
export async function checkNode(
  node: Queryable,
  server: string,
  schemaPrefix: string,
  catalog: StrayCatalog,
): Promise<{ fenced: StrayCopy[]; busy: number[] }> {
  const unfenced = await unfencedShardSchemas(node, schemaPrefix);
  const fenced: StrayCopy[] = [];
  const busy: number[] = [];
  if (unfenced.size === 0) return { fenced, busy };
  const isStray = (p: { server: string; state: string; schema: string }, schema: string) =>
    p.server !== server && p.state === 'active' && p.schema === schema;
  // A schema with the prefix but no shard of the cluster's (made by hand) is no one's copy: left alone.
  const shards = [...unfenced.keys()].filter((shard) => shard < catalog.logicalShards);
  if (shards.length === 0) return { fenced, busy };
  const placed = await readPlacements(catalog.reader, shards);
  const candidates = [...placed.values()].filter((p) => isStray(p, unfenced.get(p.shard) as string));
  if (candidates.length === 0) return { fenced, busy };
  const locker = await catalog.connect();
  try {
    for (const candidate of candidates) {
      try {
        await lockShard(locker, candidate.shard);
      } catch {
        busy.push(candidate.shard);
        continue;
      }
      try {
        const now = (await readPlacements(locker, [candidate.shard])).get(candidate.shard);
        if (!now || !isStray(now, candidate.schema)) continue;
        const message = `shard ${now.shard} lives on server ${now.server}; this copy on server ${server} is a leftover (fenced on discovery)`;
        if (await fenceSchema(node, candidate.schema, message))
          fenced.push({ shard: now.shard, schema: now.schema, home: now.server });
      } finally {
        await unlockShard(locker, candidate.shard);
      }
    }
  } finally {
    await locker.end().catch(() => {});
  }
  return { fenced, busy };
}
