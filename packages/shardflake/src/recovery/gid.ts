import { randomBytes } from 'node:crypto';

/**
 * Global transaction identifiers of cross-server commits: `sf:<cluster>:<txid>:<decision server>:<participant>`.
 *
 * - `sf:<cluster>:` lets recovery take only its own cluster's prepared transactions (a server may hold another
 *   cluster's, or another tool's) — the prefix it lists with.
 * - `<txid>` names the transaction: time (base 36, so gids sort by start) and 48 random bits.
 * - `<decision server>` is where the decision row lives (the last agent): recovery needs that one server, not all.
 * - `<participant>` keeps gids unique per PostgreSQL instance even when two configured servers are two databases
 *   of one instance (gids are instance-wide; Citus #6548 is what happens otherwise).
 * Server names are 1–63 of [A-Za-z0-9_-] (config.ts), so ':' cannot occur inside a part and a gid stays under
 * PostgreSQL's 200 bytes.
 */
export interface Gid {
  /**
   * The identity of the cluster the transaction belongs to, as its catalog records it; recovery takes only
   * its own.
   */
  cluster: string;
  /** The cross-server transaction's id: its start time in base 36, then 48 random bits in hex. */
  txid: string;
  /** The configured server that holds the transaction's decision row (its last agent). */
  decisionServer: string;
  /** The configured server this prepared part belongs to. */
  participant: string;
}

export function gidPrefix(cluster: string): string {
  return `sf:${cluster}:`;
}

export function newTxid(): string {
  return `${Date.now().toString(36)}${randomHex12()}`;
}

// Random bytes drawn 4 KiB at a time: one call to the system's generator per 682 txids instead of one per txid (a
// cost that showed in withShards' profile).
let pool = Buffer.alloc(0);
let used = 0;
function randomHex12(): string {
  if (used + 6 > pool.length) {
    pool = randomBytes(4096);
    used = 0;
  }
  used += 6;
  return pool.toString('hex', used - 6, used);
}

export function formatGid(gid: Gid): string {
  return `sf:${gid.cluster}:${gid.txid}:${gid.decisionServer}:${gid.participant}`;
}

const PART = /^[A-Za-z0-9_-]{1,63}$/;

/** The parts of a shardflake gid, or undefined for any other gid. */
export function parseGid(text: string): Gid | undefined {
  const parts = text.split(':');
  if (parts.length !== 5 || parts[0] !== 'sf') return undefined;
  const [, cluster, txid, decisionServer, participant] = parts as [string, string, string, string, string];
  if (![cluster, txid, decisionServer, participant].every((p) => PART.test(p))) return undefined;
  return { cluster, txid, decisionServer, participant };
}
