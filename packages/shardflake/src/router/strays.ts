import type pg from 'pg';
import { checkNode, type StrayCatalog } from '../fence/strays.js';
import { wrapPgError } from '../postgres/connect.js';
import type { StrayEvent } from '../telemetry/events.js';
import type { NodeLease, ServerNodes } from '../topology/nodes.js';

/**
 * The router's side of fence on discovery (fence/strays.ts has the argument): before a connection to a
 * primary serves its first statement, the node it reaches is checked for unfenced copies of shards the catalog
 * places elsewhere, and they are fenced. Checked once per node process (its address, postmaster start time and
 * system identifier: a replica promoted in place of the primary, even behind the same address, is a new one), so
 * the cost is one query per new connection and the check itself once per node.
 *
 * A check that fails (the catalog does not answer) lets the connection serve, as the router serves from its last
 * map during a catalog outage, and is tried again by the next new connection to that node.
 */
const IDENTITY_SQL = `SELECT pg_postmaster_start_time()::text || ' ' || (SELECT system_identifier::text FROM pg_control_system()) AS id`;

export function guardStrays(
  nodes: ServerNodes,
  schemaPrefix: () => string,
  catalog: StrayCatalog,
  emit: ((event: StrayEvent) => void) | undefined,
): ServerNodes {
  const checkedClients = new WeakSet<pg.PoolClient>();
  const checkedNodes = new Map<string, Promise<void>>();

  async function check(lease: NodeLease): Promise<void> {
    const { rows } = await lease.client.query(IDENTITY_SQL);
    const id = `${lease.node} ${(rows[0] as { id: string }).id}`;
    let checking = checkedNodes.get(id);
    if (!checking) {
      checking = checkNode(lease.client, nodes.name, schemaPrefix(), catalog).then(
        ({ fenced }) => {
          if (fenced.length > 0)
            emit?.({
              type: 'stray-fenced',
              server: nodes.name,
              node: lease.node,
              shards: fenced.map((c) => c.shard),
            });
        },
        () => {
          checkedNodes.delete(id);
        },
      );
      checkedNodes.set(id, checking);
    }
    await checking;
  }

  return {
    name: nodes.name,
    hasReplicas: nodes.hasReplicas,
    async acquire(options) {
      const lease = await nodes.acquire(options);
      if (lease.role !== 'primary' || checkedClients.has(lease.client)) return lease;
      try {
        await check(lease);
      } catch (error) {
        lease.release(error);
        throw wrapPgError(error);
      }
      checkedClients.add(lease.client);
      return lease;
    },
    positionAfterWrite: (lease) => nodes.positionAfterWrite(lease),
    noteError: (node, error) => nodes.noteError(node, error),
    end: () => nodes.end(),
  };
}
