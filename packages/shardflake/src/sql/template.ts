import { randomBytes } from 'node:crypto';
import type { Node } from '@pgsql/types';
import { ShardflakeError } from '../errors/errors.js';

/**
 * Statement text with holes. The planner rewrites the tree once per query and the printer prints it once; the
 * per-shard and per-server texts are then that print with its holes filled (a shard's quoted schema name, or a
 * server's UNION ALL of branches). Printing the tree once per shard instead would cost ≈ 0.5 ms a shard, half a
 * second for 1,024 shards.
 *
 * A hole is a random identifier (`shardflake_hole_<hex>`) that the planner writes into the tree where a name goes
 * (a table's schema, a FROM item). It is safe to cut the print at it because the query text does not contain it
 * (checked, so no literal or comment of the user can hold it) and the print holds exactly as many as the planner
 * placed (checked): every cut is one of ours.
 */
export class Holes {
  readonly marker: string;
  /** Reference tables: named by the reference schema, never by a hole. */
  readonly reference: ReadonlySet<string>;
  constructor(queryText: string, reference: ReadonlySet<string> = new Set()) {
    this.reference = reference;
    let marker: string;
    do marker = `shardflake_hole_${randomBytes(8).toString('hex')}`;
    while (queryText.includes(marker));
    this.marker = marker;
  }
}

export class Template {
  readonly #parts: string[];

  constructor(print: (node: Node) => string, node: Node, marker: string, holes: number) {
    this.#parts = print(node).split(marker);
    if (this.#parts.length !== holes + 1)
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `router.sql: the printed statement holds ${this.#parts.length - 1} placeholders where ${holes} were placed`,
      );
  }

  fill(value: string): string {
    return this.#parts.join(value);
  }
}
