import { ShardflakeError } from 'shardflake/internal/errors/errors.js';

/**
 * Flag parsers shared by more than one command. Each turns bad input into one INVALID_ARGUMENT sentence that the
 * CLI prints as a single stderr line.
 */

/** `--epoch`: milliseconds since 1970, or an ISO 8601 date. */
export function epochOption(value: string): number {
  const ms = /^[0-9]+$/.test(value.trim()) ? Number(value) : Date.parse(value);
  if (!Number.isSafeInteger(ms) || ms < 0) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--epoch must be milliseconds since 1970 or an ISO 8601 date, not ${JSON.stringify(value)}`,
    );
  }
  return ms;
}

/** A whole-number flag of at least `min` (default 1): `--rows`, `--shards`, `--rounds`, … */
export function positiveInteger(flag: string, min = 1) {
  return (value: string): number => {
    const n = /^[0-9]+$/.test(value.trim()) ? Number(value) : Number.NaN;
    if (!(Number.isSafeInteger(n) && n >= min)) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `${flag} must be a whole number ≥ ${min}, not ${JSON.stringify(value)}`,
      );
    }
    return n;
  };
}

/** A share above 0 and at most 1: `--build-share 0.5`. */
export function shareOption(flag: string) {
  return (value: string): number => {
    const n = /^(0|1)?(\.[0-9]+)?$/.test(value.trim()) && value.trim() !== '' ? Number(value) : Number.NaN;
    if (!(n > 0 && n <= 1)) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `${flag} must be a number above 0 and at most 1, such as 0.5, not ${JSON.stringify(value)}`,
      );
    }
    return n;
  };
}
