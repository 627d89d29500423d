import { ShardflakeError } from '../errors/errors.js';
import type { Lsn } from './nodes.js';

/**
 * WAL positions as numbers. PostgreSQL prints an LSN as two hex halves of a 64-bit byte position (`16/B374D848`);
 * comparing the strings would put `9/0` after `10/0`, so positions are compared as bigints.
 */
export function lsnToBigint(lsn: Lsn): bigint {
  const match = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(lsn);
  if (!match)
    throw new ShardflakeError('INVALID_ARGUMENT', `${JSON.stringify(lsn)} is not a WAL position (X/Y)`);
  return (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`);
}

/** The later of two positions (undefined counts as the start of the WAL). */
export function laterLsn(a: Lsn | undefined, b: Lsn | undefined): Lsn | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return lsnToBigint(b) > lsnToBigint(a) ? b : a;
}
