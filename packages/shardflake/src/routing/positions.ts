import { ShardflakeError } from '../errors/errors.js';
import type { Lsn } from '../topology/nodes.js';

/**
 * Read-your-writes across replicas: the newest write position (WAL LSN) the router has seen per server. A read
 * acquires a node with `after` = this position, so a replica that has not replayed the router's own writes is
 * passed over (ServerNodes falls back to the primary). Positions are only recorded for servers with replicas.
 *
 * A read token carries the positions to another process (a web request handled by another instance, a job queue):
 * `router.readToken()` gives an opaque string, `router.observe(token)` or `withShard(…, { after: token })` makes
 * later reads wait for those writes. The string is base64url of `{"v":1,"p":{"server":"LSN"}}`; treat it as opaque.
 */
export class ReadPositions {
  readonly #byServer = new Map<string, Lsn>();

  /** Keeps the higher of the known and the given position. */
  note(server: string, lsn: Lsn): void {
    const known = this.#byServer.get(server);
    if (known === undefined || compareLsn(lsn, known) > 0) this.#byServer.set(server, lsn);
  }

  get(server: string): Lsn | undefined {
    return this.#byServer.get(server);
  }

  /** The position a read on `server` must see: the router's own, or the token's when that is newer. */
  after(server: string, token?: ReadPositions): Lsn | undefined {
    const own = this.#byServer.get(server);
    const theirs = token?.get(server);
    if (theirs === undefined) return own;
    if (own === undefined) return theirs;
    return compareLsn(theirs, own) > 0 ? theirs : own;
  }

  /** Takes in every position of `other` that is newer. */
  merge(other: ReadPositions): void {
    for (const [server, lsn] of other.#byServer) this.note(server, lsn);
  }

  toToken(): string {
    return Buffer.from(JSON.stringify({ v: 1, p: Object.fromEntries(this.#byServer) })).toString('base64url');
  }

  static fromToken(token: string): ReadPositions {
    const positions = new ReadPositions();
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.from(String(token), 'base64url').toString('utf8'));
    } catch {
      parsed = undefined;
    }
    const p = (parsed as { v?: unknown; p?: unknown } | undefined)?.p;
    if ((parsed as { v?: unknown } | undefined)?.v !== 1 || typeof p !== 'object' || p === null)
      throw new ShardflakeError('INVALID_ARGUMENT', 'the read token is not one this router made');
    for (const [server, lsn] of Object.entries(p)) {
      if (typeof lsn !== 'string' || !LSN_PATTERN.test(lsn))
        throw new ShardflakeError('INVALID_ARGUMENT', 'the read token is not one this router made');
      positions.note(server, lsn);
    }
    return positions;
  }
}

const LSN_PATTERN = /^[0-9A-F]{1,8}\/[0-9A-F]{1,8}$/i;

/** Compares two LSNs ("16/B374D848") as the 64-bit numbers they print: negative, 0 or positive. */
export function compareLsn(a: Lsn, b: Lsn): number {
  const value = (lsn: Lsn) => {
    const [high = '0', low = '0'] = lsn.split('/');
    return (BigInt(`0x${high}`) << 32n) | BigInt(`0x${low}`);
  };
  const x = value(a);
  const y = value(b);
  return x < y ? -1 : x > y ? 1 : 0;
}
