import type pg from 'pg';
import type { Migration } from '../config/config.js';
import type { ConcurrentIndexStatement } from '../config/statement-rules.js';
import { ShardflakeError } from '../errors/errors.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';

/**
 * A migration of `CREATE [UNIQUE] INDEX CONCURRENTLY` / `DROP INDEX CONCURRENTLY` statements on one shard.
 *
 * Such a statement cannot run in a transaction, so unlike the other migrations it cannot commit together with the
 * row that records its version in `_shardflake_migrations`. A run can die between the two, or in the middle of the
 * build, and the next run must still do the right thing. Each statement is therefore made idempotent by looking
 * its index up by name in the shard's schema first:
 *
 * - CREATE, index missing: build it.
 * - CREATE, index there and valid: a previous run built it and died before recording the version; it counts as
 *   built (as `IF NOT EXISTS` would count it).
 * - CREATE, index there but invalid (`pg_index.indisvalid = false`): a build failed or was killed. PostgreSQL keeps
 *   such an index, updates it on every write and never uses it, and `CREATE INDEX CONCURRENTLY IF NOT EXISTS` would
 *   skip it forever; so it is dropped (`DROP INDEX CONCURRENTLY`) and built again.
 * - DROP, index missing: already dropped. DROP, index there (valid or not: a killed DROP … CONCURRENTLY leaves it
 *   invalid): drop it.
 *
 * The version is recorded only after every statement of the migration succeeded and its index was read back in the
 * state wanted. The caller holds the shard's move lock for all of it, so no other migrate or move works on the
 * shard meanwhile; nothing stops a person from running DDL by hand, which is why the state is read, not assumed.
 *
 * The session sets `client_connection_check_interval`, so a build whose migrate process was killed is cancelled by
 * the server within a second (otherwise it would run on unseen); the index it leaves invalid is rebuilt next run.
 */
export interface IndexBuildEvent {
  /** The logical shard whose index is built or dropped. */
  shard: number;
  /** The server the shard lives on. */
  server: string;
  /** The shard's schema on that server. */
  schema: string;
  /** The index's name, as the CREATE or DROP INDEX CONCURRENTLY statement names it. */
  index: string;
  /** Whether the statement creates (`create`) or drops (`drop`) the index. */
  action: ConcurrentIndexStatement['action'];
  /** `started` before the statement is sent; `finished` or `failed` after; `skipped` when already in place. */
  phase: 'started' | 'finished' | 'failed' | 'skipped';
  /** True when an invalid index left by an earlier build was dropped first. */
  rebuilt?: boolean;
}

/** How often (ms) the server checks that a build's client is still connected. */
const CLIENT_CHECK_MS = 1000;

async function indexState(
  client: pg.Client,
  schema: string,
  index: string,
): Promise<'valid' | 'invalid' | null> {
  const { rows } = await client.query(
    `SELECT i.indisvalid AS valid FROM pg_class c
     JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_index i ON i.indexrelid = c.oid
     WHERE n.nspname = $1 AND c.relname = $2`,
    [schema, index],
  );
  const row = rows[0] as { valid: boolean } | undefined;
  if (!row) return null;
  return row.valid ? 'valid' : 'invalid';
}

/** Runs `sql` alone (not in a transaction) with the shard's schema as the whole search_path, then resets it. */
async function runInSchema(client: pg.Client, schema: string, sql: string): Promise<void> {
  // Session-level SET: SET LOCAL needs a transaction, and a multi-statement string is one implicit transaction.
  await client.query(`SET search_path TO ${quoteIdent(schema, 'schema')}`);
  try {
    await client.query(sql);
  } finally {
    await client.query('RESET search_path').catch(() => {});
  }
}

async function dropInvalid(client: pg.Client, schema: string, index: string): Promise<void> {
  await client.query(`DROP INDEX CONCURRENTLY IF EXISTS ${qualified(schema, index)}`);
}

/**
 * Applies one concurrent migration's statements to a shard (see above). Does not record the version: the caller
 * does, in a transaction, once this resolves. Throws the server's error; a failed build's invalid index is dropped
 * at once when the connection still works (so writes stop paying for it), and otherwise by the next run.
 */
export async function applyConcurrentMigration(
  client: pg.Client,
  shard: { shard: number; server: string; schema: string },
  migration: Migration,
  onEvent: (event: IndexBuildEvent) => void = () => {},
): Promise<void> {
  const { schema } = shard;
  await client.query(`SET client_connection_check_interval = ${CLIENT_CHECK_MS}`);
  for (const statement of migration.concurrent ?? []) {
    const { index, action } = statement;
    const event = (phase: IndexBuildEvent['phase'], rebuilt?: boolean) =>
      onEvent({ ...shard, index, action, phase, ...(rebuilt === undefined ? {} : { rebuilt }) });
    const before = await indexState(client, schema, index);
    if ((action === 'create' && before === 'valid') || (action === 'drop' && before === null)) {
      event('skipped');
      continue;
    }
    const rebuilt = action === 'create' && before === 'invalid';
    event('started', rebuilt);
    try {
      if (rebuilt) await dropInvalid(client, schema, index);
      await runInSchema(client, schema, statement.sql);
      const after = await indexState(client, schema, index);
      const wanted = action === 'create' ? 'valid' : null;
      if (after !== wanted) {
        throw new ShardflakeError(
          'DATABASE_ERROR',
          `index ${index} is ${after ?? 'missing'} after ${action === 'create' ? 'its build' : 'its drop'}`,
        );
      }
    } catch (error) {
      event('failed', rebuilt);
      if (action === 'create') await dropInvalid(client, schema, index).catch(() => {});
      throw error;
    }
    event('finished', rebuilt);
  }
}

/** A counting semaphore: at most `size` holders at once, served in arrival order. */
export class Slots {
  #free: number;
  readonly #waiting: (() => void)[] = [];

  constructor(size: number) {
    this.#free = size;
  }

  /**
   * Runs `work` in a slot. With `restMs`, the slot stays taken for `restMs()` ms more after the work ends (the
   * caller goes on at once): a pace for whoever waits for the slot next.
   */
  async run<T>(work: () => Promise<T>, restMs?: () => number): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await work();
    } finally {
      const rest = restMs?.() ?? 0;
      // unref: a rest still running when the migration ends does not keep the host's process alive.
      if (rest > 0) setTimeout(() => this.#release(), rest).unref();
      else this.#release();
    }
  }

  #release(): void {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#free++;
  }
}
