import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type pg from 'pg';
import { wrapPgError } from '../postgres/connect.js';
import { quoteIdent } from '../postgres/identifier.js';
import type { RouterContext } from '../routing/context.js';
import { acquireOn, isConnectionLost } from '../routing/lease.js';
import { type MapState, placementIn } from '../routing/map.js';
import type { OperationTrace } from '../telemetry/trace.js';
import type { GroupsPlan, RowsPlan } from './plan.js';
import type { Cell } from './values.js';

/**
 * Primitive "send to servers": one statement per server — the UNION ALL of the branch filled with each of the
 * server's shards' schemas, wrapped in the plan's server statement — so a query costs as many round trips as
 * there are servers, whatever the number of shards. Rows come back as PostgreSQL's text with each column's type
 * OID (the router parses them once, at the end, see values.ts).
 */
export interface Column {
  name: string;
  oid: number;
}

export interface ServerRows {
  server: string;
  columns: Column[];
  rows: Cell[][];
}

/** Every value as the text the server sent. */
const RAW_TYPES = { getTypeParser: () => (value: string) => value };

export function serverStatements(
  plan: GroupsPlan | RowsPlan,
  map: MapState,
  trace?: OperationTrace,
): Map<string, string> {
  const schemas = new Map<string, string[]>();
  // While an adoption serves every shard from the source's one schema, one shard reads all of it once.
  const count = map.adoption?.servingFromSource ? 1 : map.logicalShards;
  for (let shard = 0; shard < count; shard++) {
    const p = placementIn(map, shard);
    trace?.shard(shard);
    const list = schemas.get(p.server);
    if (list) list.push(p.schema);
    else schemas.set(p.server, [p.schema]);
  }
  const texts = new Map<string, string>();
  for (const [server, list] of schemas) {
    const union = list
      .map((schema) => `(${plan.branch.fill(quoteIdent(schema, 'schema'))})`)
      .join(' UNION ALL ');
    texts.set(server, plan.server ? plan.server.fill(`(${union})`) : union);
  }
  return texts;
}

const columnsOf = (fields: readonly pg.FieldDef[]): Column[] =>
  fields.map((f) => ({ name: f.name, oid: f.dataTypeID }));

/** One statement per server, all at once; each server's whole answer. */
export async function runOnServers(
  ctx: RouterContext,
  texts: Map<string, string>,
  values: readonly unknown[],
  trace?: OperationTrace,
  prepare = false,
): Promise<ServerRows[]> {
  return Promise.all(
    [...texts].map(async ([server, text]) => {
      const lease = await acquireOn(ctx, server, { intent: 'read', after: ctx.positions.get(server) });
      trace?.lease(server, lease);
      try {
        const result = await lease.client.query({
          // pg parses a named statement once per connection; the name is the text's hash, so a text is one name.
          ...(prepare
            ? { name: `shardflake_sql_${createHash('sha256').update(text).digest('hex').slice(0, 32)}` }
            : {}),
          text,
          values: [...values],
          rowMode: 'array',
          types: RAW_TYPES,
        });
        lease.release();
        return { server, columns: columnsOf(result.fields), rows: result.rows as Cell[][] };
      } catch (error) {
        const lost = isConnectionLost(error, lease.client);
        ctx.nodes(server).noteError(lease.node, error);
        lease.release(lost ? error : undefined);
        throw wrapPgError(error, lease.node);
      }
    }),
  );
}

interface CursorLike {
  read(rows: number): Promise<Cell[][]>;
  close(): Promise<void>;
  _result?: { fields?: pg.FieldDef[] };
}
type CursorClass = new (text: string, values: unknown[], config: object) => CursorLike;
let Cursor: CursorClass | undefined;

/**
 * One server's answer as a stream: a portal read `batch` rows at a time (pg-cursor), so a big answer is never
 * held whole. The connection is held until the stream ends or is closed.
 */
export interface ServerStream {
  columns(): Promise<Column[]>;
  next(): Promise<Cell[] | undefined>;
  close(): Promise<void>;
}

export async function openServerStream(
  ctx: RouterContext,
  server: string,
  text: string,
  values: readonly unknown[],
  batch: number,
  trace?: OperationTrace,
): Promise<ServerStream> {
  Cursor ??= createRequire(import.meta.url)('pg-cursor') as CursorClass;
  // Built before the connection is taken: nothing between acquire and the cursor's first read may throw, or the
  // connection would never go back to the pool.
  const query = new Cursor(text, [...values], {
    rowMode: 'array',
    types: RAW_TYPES,
  }) as unknown as pg.Submittable;
  const lease = await acquireOn(ctx, server, { intent: 'read', after: ctx.positions.get(server) });
  trace?.lease(server, lease);
  const cursor = lease.client.query(query) as unknown as CursorLike;
  let buffer: Cell[][] = [];
  let at = 0;
  let done = false;
  let released = false;
  const finish = async (error?: unknown) => {
    if (released) return;
    released = true;
    done = true;
    await cursor.close().catch(() => {});
    lease.release(error);
  };
  const read = async () => {
    try {
      buffer = await cursor.read(batch);
      at = 0;
      if (buffer.length === 0) await finish();
    } catch (error) {
      const lost = isConnectionLost(error, lease.client);
      ctx.nodes(server).noteError(lease.node, error);
      released = true;
      done = true;
      // a portal that failed leaves the connection usable only after its transaction ends: discard it
      lease.release(lost ? error : true);
      throw wrapPgError(error, lease.node);
    }
  };
  const first = read();
  first.catch(() => {});
  return {
    async columns() {
      await first;
      return columnsOf(cursor._result?.fields ?? []);
    },
    async next() {
      await first;
      while (at >= buffer.length) {
        if (done) return undefined;
        await read();
      }
      return buffer[at++];
    },
    close: () => finish(),
  };
}

const collations = new WeakMap<RouterContext, Map<string, Promise<boolean>>>();

/**
 * Whether a server's database sorts text by code point (collation C or POSIX, or the builtin C.UTF-8), which
 * the router can reproduce. Asked once per router and server, and only by plans that order text.
 */
export function sortsByCodePoint(ctx: RouterContext, server: string): Promise<boolean> {
  let known = collations.get(ctx);
  if (!known) {
    known = new Map();
    collations.set(ctx, known);
  }
  let answer = known.get(server);
  if (!answer) {
    answer = (async () => {
      const lease = await acquireOn(ctx, server, { intent: 'read' });
      try {
        const result = await lease.client.query(
          `SELECT datcollate, datlocprovider::text AS provider FROM pg_database WHERE datname = current_database()`,
        );
        lease.release();
        const row = result.rows[0] as { datcollate: string; provider: string } | undefined;
        return (
          row !== undefined &&
          ['C', 'POSIX', 'C.UTF-8', 'C.utf8'].includes(row.datcollate) &&
          row.provider !== 'i'
        );
      } catch (error) {
        lease.release(error);
        throw wrapPgError(error, lease.node);
      }
    })();
    answer.catch(() => known?.delete(server));
    known.set(server, answer);
  }
  return answer;
}
