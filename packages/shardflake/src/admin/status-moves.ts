import { unfinishedMovesWithOwners } from '../catalog/moves.js';
import type { ShardMap } from '../catalog/shards.js';
import { FENCE_FUNCTION } from '../fence/fence.js';
import { connect, describeUrl, type Queryable } from '../postgres/connect.js';

/**
 * What `cluster status` says about moves, so that it tells the truth after a fault:
 * - unfinished moves, and which are abandoned (no live process holds the shard's lock): their shards stay
 *   `moving`, and past the fence refuse writes, until a rerun or `cluster cleanup` settles them;
 * - leftover copies: a shard's schema on a node (primary or replica) of a server the map does not place it on,
 *   fenced or not (an unfenced one on a primary is a second writable copy);
 * - replicas behind a fence: a node that holds an unfenced copy that its primary has fenced.
 */
export interface MoveStatus {
  unfinished: {
    moveId: string;
    shard: number;
    from: string;
    to: string;
    phase: string;
    owner: string | null;
    abandoned: boolean;
  }[];
  leftovers: { shard: number; schema: string; server: string; node: string; role: string; fenced: boolean }[];
}

const LEFTOVERS_SQL = `SELECT n.nspname::text AS schema, pg_is_in_recovery() AS replica,
       EXISTS (SELECT 1 FROM pg_proc p WHERE p.pronamespace = n.oid AND p.proname = $2) AS fenced
  FROM pg_namespace n WHERE n.nspname ~ ('^' || $1 || '[0-9]{4}$') ORDER BY 1`;

export async function readMoveStatus(
  catalog: Queryable,
  map: ShardMap,
  nodeUrls: ReadonlyMap<string, readonly string[]>,
  schemaPrefix: string,
): Promise<MoveStatus> {
  const unfinished = (await unfinishedMovesWithOwners(catalog).catch(() => [])).map((m) => ({
    moveId: String(m.id),
    shard: m.shard,
    from: m.from,
    to: m.to,
    phase: m.phase,
    owner: m.owner,
    abandoned: m.abandoned,
  }));
  const home = new Map(map.shards.map((s) => [s.schema, s]));
  const moving = new Set(unfinished.map((m) => m.shard));
  const leftovers: MoveStatus['leftovers'] = [];
  await Promise.all(
    [...nodeUrls].flatMap(([server, urls]) =>
      urls.map(async (url) => {
        const client = await connect(url, {
          connectTimeoutMs: 3000,
          applicationName: 'shardflake status',
        }).catch(() => null);
        if (!client) return;
        try {
          const { rows } = await client.query(LEFTOVERS_SQL, [schemaPrefix, FENCE_FUNCTION]);
          for (const r of rows as { schema: string; replica: boolean; fenced: boolean }[]) {
            const placed = home.get(r.schema);
            if (!placed || placed.server === server || moving.has(placed.shard)) continue;
            leftovers.push({
              shard: placed.shard,
              schema: r.schema,
              server,
              node: describeUrl(url),
              role: r.replica ? 'replica' : 'primary',
              fenced: r.fenced,
            });
          }
        } catch {
          // An unreachable or failing node is reported by the node list already.
        } finally {
          await client.end().catch(() => {});
        }
      }),
    ),
  );
  leftovers.sort((x, y) => x.shard - y.shard || x.node.localeCompare(y.node));
  return { unfinished, leftovers };
}

/** The warnings the move status adds to `cluster status`. */
export function moveWarnings(status: MoveStatus): string[] {
  const warnings: string[] = [];
  for (const m of status.unfinished.filter((x) => x.abandoned)) {
    warnings.push(
      `move #${m.moveId} of shard ${m.shard} (server ${m.from} to ${m.to}) was abandoned in phase ${m.phase}${m.phase === 'fenced' ? ': the shard refuses writes' : ''}; rerun the move or run cluster cleanup`,
    );
  }
  for (const l of status.leftovers) {
    if (l.fenced) continue;
    const primaryFenced = status.leftovers.some(
      (p) => p.schema === l.schema && p.server === l.server && p.role === 'primary' && p.fenced,
    );
    warnings.push(
      l.role === 'replica' && primaryFenced
        ? `replica ${l.node} of server ${l.server} is behind the fence of shard ${l.shard}: a failover to it would make that old copy writable`
        : `leftover copy ${l.schema} of shard ${l.shard} on ${l.role} ${l.node} of server ${l.server} is NOT fenced: writes there are lost to the shard's home; run cluster cleanup (it fences it, and keeps it if it took writes)`,
    );
  }
  const fenced = status.leftovers.filter((l) => l.fenced && l.role === 'primary').length;
  if (fenced > 0) warnings.push(`${fenced} fenced old copies wait for cluster cleanup`);
  return warnings;
}
