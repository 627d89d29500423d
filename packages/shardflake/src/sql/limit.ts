import type { Node } from '@pgsql/types';
import { ShardflakeError } from '../errors/errors.js';
import type { Limits } from './plan.js';
import { integerConstant } from './tree.js';

/**
 * Primitive "cut at a limit": skips OFFSET rows and stops after LIMIT, in the router, after the servers' rows are
 * merged (each shard already stopped at LIMIT + OFFSET rows). A stream stops reading its servers at the limit.
 */
export interface Cut {
  offset: number;
  count: number | undefined;
}

function limitValue(node: Node | undefined, values: readonly unknown[], what: string): number | undefined {
  if (!node) return undefined;
  const constant = integerConstant(node);
  const raw = constant ?? ('ParamRef' in node ? values[(node.ParamRef.number ?? 1) - 1] : undefined);
  if (raw === null) return undefined;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 0)
    throw new ShardflakeError('INVALID_ARGUMENT', `router.sql: ${what} must be a whole number ≥ 0`);
  return n;
}

export function resolveCut(limits: Limits, values: readonly unknown[]): Cut {
  return {
    offset: limitValue(limits.offset, values, 'OFFSET') ?? 0,
    count: limitValue(limits.count, values, 'LIMIT'),
  };
}

export async function* cut<T>(rows: AsyncIterable<T>, { offset, count }: Cut): AsyncGenerator<T> {
  if (count === 0) return;
  let skipped = 0;
  let taken = 0;
  for await (const row of rows) {
    if (skipped < offset) {
      skipped++;
      continue;
    }
    yield row;
    if (count !== undefined && ++taken >= count) return;
  }
}
