import mysql from 'mysql2/promise';
import { redactSecrets, ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { quoteIdent } from 'shardflake/internal/postgres/identifier.js';
import { type Counters, type InsertTarget, type TableSizes, tableFor } from './inserts-target.js';
import type { IdType } from './inserts-types.js';

/** Rows per multi-row INSERT while preloading. */
const PRELOAD_CHUNK = 5_000;

export interface MariadbOptions {
  /** Shrink the buffer pool (and relax redo flushing) for the run; the previous values are restored on close. */
  smallCache?: boolean;
}

/** Settings `--small-cache` applies to InnoDB, as BENCH-NOTES suggests: a 32 MB pool, redo flushed once a second. */
export const INNODB_SMALL_CACHE = {
  innodb_buffer_pool_size: 32 * 2 ** 20,
  innodb_flush_log_at_trx_commit: 2,
} as const;

/** Table names are validated identifiers ([a-z0-9_]); MySQL quotes them with backticks. */
const tick = (name: string): string => `\`${quoteIdent(name).slice(1, -1)}\``;

function wrap(error: unknown, url: string): ShardflakeError {
  if (error instanceof ShardflakeError) return error;
  const e = error as { code?: string; message?: string };
  const where = redactSecrets(url);
  if (e?.code && ['ECONNREFUSED', 'ENOTFOUND', 'ETIMEDOUT', 'ECONNRESET', 'EHOSTUNREACH'].includes(e.code)) {
    return new ShardflakeError(
      'SERVER_UNREACHABLE',
      `MariaDB/MySQL server at ${where} is unreachable (${e.code})`,
      {
        cause: error,
      },
    );
  }
  return new ShardflakeError(
    'DATABASE_ERROR',
    `MariaDB/MySQL at ${where}: ${redactSecrets(String(e?.message))}`,
    {
      cause: error,
    },
  );
}

/**
 * The insert benchmark on InnoDB, which stores each row inside its primary-key B-tree: a random key moves the
 * whole row to a random page, so the penalty should be larger than in Postgres's heap + separate index.
 * Types that Postgres generates itself have no InnoDB twin except bigserial (AUTO_INCREMENT); `instagram` is
 * generated app-side there.
 */
export async function mariadbTarget(url: string, options: MariadbOptions = {}): Promise<InsertTarget> {
  let conn: mysql.Connection;
  try {
    conn = await mysql.createConnection({ uri: url, connectTimeout: 5000 });
  } catch (error) {
    throw wrap(error, url);
  }
  const restore: [string, string][] = [];
  try {
    const get = async (name: string): Promise<string> => {
      const [rows] = await conn.query(`SELECT @@GLOBAL.${name} AS v`);
      return String((rows as { v: unknown }[])[0]?.v);
    };
    if (options.smallCache) {
      for (const [name, value] of Object.entries(INNODB_SMALL_CACHE)) {
        restore.push([name, await get(name)]);
        await conn.query(`SET GLOBAL ${name} = ?`, [value]);
      }
      // The pool resizes in the background; wait until it reports the new size.
      for (
        let i = 0;
        i < 50 && Number(await get('innodb_buffer_pool_size')) !== INNODB_SMALL_CACHE.innodb_buffer_pool_size;
        i++
      ) {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const hasSplits = await conn
      .query(`SET GLOBAL innodb_monitor_enable = 'index_page_splits'`)
      .then(() => true)
      .catch(() => false);
    const version = await get('version');
    const pool = Number(await get('innodb_buffer_pool_size'));
    const flush = await get('innodb_flush_log_at_trx_commit');
    return new MariadbTarget(conn, url, restore, hasSplits, {
      description: `MariaDB/MySQL ${version} at ${redactSecrets(url)} (innodb_buffer_pool_size ${Math.round(pool / 2 ** 20)} MB, innodb_flush_log_at_trx_commit=${flush})`,
      cacheBytes: pool,
    });
  } catch (error) {
    await restoreSettings(conn, restore);
    await conn.end().catch(() => {});
    throw wrap(error, url);
  }
}

async function restoreSettings(conn: mysql.Connection, restore: [string, string][]): Promise<void> {
  for (const [name, value] of restore)
    await conn.query(`SET GLOBAL ${name} = ?`, [Number(value)]).catch(() => {});
}

class MariadbTarget implements InsertTarget {
  readonly engine = 'mariadb' as const;
  readonly description: string;
  readonly cacheBytes: number;
  private readonly created = new Set<string>();

  constructor(
    private readonly conn: mysql.Connection,
    private readonly url: string,
    private readonly restore: [string, string][],
    private readonly hasSplits: boolean,
    info: { description: string; cacheBytes: number },
  ) {
    this.description = info.description;
    this.cacheBytes = info.cacheBytes;
  }

  private async run(sql: string, values?: unknown[]): Promise<unknown> {
    try {
      const [rows] = await this.conn.query(sql, values);
      return rows;
    } catch (error) {
      throw wrap(error, this.url);
    }
  }

  async prepare(type: IdType): Promise<void> {
    const table = tick(tableFor(type));
    await this.run(`DROP TABLE IF EXISTS ${table}`);
    await this.run(`CREATE TABLE ${table} (id ${type.mysqlColumn}, n BIGINT NOT NULL) ENGINE=InnoDB`);
    this.created.add(table);
  }

  async preload(type: IdType, rows: number): Promise<void> {
    const table = tick(tableFor(type));
    for (let done = 0; done < rows; done += PRELOAD_CHUNK) {
      const count = Math.min(PRELOAD_CHUNK, rows - done);
      const values = Array.from({ length: count }, (_, i) =>
        type.mysqlValue ? [type.mysqlValue(), -rows + done + i] : [-rows + done + i],
      );
      await this.run(`INSERT INTO ${table} (${type.mysqlValue ? 'id, n' : 'n'}) VALUES ?`, [values]);
    }
  }

  async checkpoint(): Promise<void> {
    // InnoDB has no CHECKPOINT statement; its fuzzy checkpointing runs on its own.
  }

  key(type: IdType): unknown {
    return type.mysqlValue?.();
  }

  async insert(type: IdType, n: number, key: unknown): Promise<void> {
    const table = tick(tableFor(type));
    try {
      if (type.mysqlValue)
        await this.conn.execute(`INSERT INTO ${table} (id, n) VALUES (?, ?)`, [key as string, n]);
      else await this.conn.execute(`INSERT INTO ${table} (n) VALUES (?)`, [n]);
    } catch (error) {
      throw wrap(error, this.url);
    }
  }

  async counters(): Promise<Counters> {
    const status = (await this.run(
      `SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_os_log_written', 'Innodb_buffer_pool_reads', 'Innodb_buffer_pool_read_requests')`,
    )) as { Variable_name: string; Value: string }[];
    const value = (name: string) => Number(status.find((r) => r.Variable_name === name)?.Value ?? Number.NaN);
    let pageSplits: number | undefined;
    if (this.hasSplits) {
      const rows = (await this.run(
        `SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'index_page_splits'`,
      )) as { count: number }[];
      pageSplits = Number(rows[0]?.count);
    }
    const reads = value('Innodb_buffer_pool_reads');
    return {
      logBytes: value('Innodb_os_log_written'),
      blocksRead: reads,
      blocksHit: value('Innodb_buffer_pool_read_requests') - reads,
      ...(pageSplits === undefined ? {} : { pageSplits }),
    };
  }

  async sizes(type: IdType): Promise<TableSizes> {
    const name = tableFor(type);
    await this.run(`ANALYZE TABLE ${tick(name)}`);
    const rows = (await this.run(
      `SELECT data_length AS d, index_length AS i FROM information_schema.TABLES
       WHERE table_schema = DATABASE() AND table_name = ?`,
      [name],
    )) as { d: number; i: number }[];
    // InnoDB's primary key is the table (a clustered index): its size is data_length.
    const data = Number(rows[0]?.d ?? 0);
    return { indexBytes: data, tableBytes: data };
  }

  async close(): Promise<void> {
    for (const table of this.created) await this.run(`DROP TABLE IF EXISTS ${table}`).catch(() => {});
    await restoreSettings(this.conn, this.restore);
    await this.conn.end().catch(() => {});
  }
}
