import type { Command } from 'commander';
import { loadConfig } from 'shardflake/internal/config/config.js';
import { checkPrivileges } from 'shardflake/internal/fence/privileges.js';
import { createRouter } from 'shardflake/internal/router/router.js';
import type { Row } from 'shardflake/internal/routing/rows.js';
import type { SqlColumn } from 'shardflake/internal/sql/index.js';
import { toJson } from './output.js';

/** Type OIDs psql right-aligns (numbers). */
const NUMERIC_TYPES = new Set([20, 21, 23, 26, 700, 701, 790, 1700]);

function cell(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (typeof value === 'boolean') return value ? 't' : 'f';
  if (value instanceof Date) return value.toISOString();
  if (typeof value === 'object')
    return JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? String(v) : v));
  return String(value);
}

/** The answer as psql prints it: a header, a rule, aligned cells (numbers to the right), the row count. */
export function formatTable(columns: readonly SqlColumn[], rows: readonly Row[]): string {
  const cells = rows.map((row) => columns.map((c) => cell(row[c.name])));
  const widths = columns.map((c, i) => Math.max(c.name.length, ...cells.map((r) => (r[i] as string).length)));
  const line = (values: string[], header: boolean) =>
    ` ${values
      .map((v, i) => {
        const width = widths[i] as number;
        const right = !header && NUMERIC_TYPES.has(columns[i]?.type as number);
        if (header) {
          const pad = width - v.length;
          return `${' '.repeat(Math.floor(pad / 2))}${v}${' '.repeat(Math.ceil(pad / 2))}`;
        }
        return right ? v.padStart(width) : v.padEnd(width);
      })
      .join(' | ')}`.trimEnd();
  const rule = widths.map((w) => '-'.repeat(w + 2)).join('+');
  const count = `(${rows.length} ${rows.length === 1 ? 'row' : 'rows'})`;
  return [
    line(
      columns.map((c) => c.name),
      true,
    ),
    rule,
    ...cells.map((r) => line(r, false)),
    count,
    '',
  ].join('\n');
}

/** `shardflake cluster sql --config FILE "SELECT …" [--param V]… [--json]`: router.sql from the command line. */
export function registerSqlQueryCommand(cluster: Command): void {
  cluster
    .command('sql')
    .description('answer one SELECT across every shard (aggregates, GROUP BY, ORDER BY, …; see docs/sql.md)')
    .argument(
      '<query>',
      'one SELECT over the sharded tables by their unqualified names; $1, $2 … for --param',
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .option(
      '--param <value>',
      'a value for $1, $2 … in order (repeat the flag)',
      (v: string, all: string[]) => [...all, v],
      [],
    )
    .option('--json', 'print { columns, rows } as JSON')
    .action(async (query: string, flags: { config: string; param: string[]; json?: boolean }) => {
      const config = await loadConfig(flags.config);
      // The router reads the catalog, as status does; reading the shards is the servers' own check.
      await checkPrivileges(config, 'status', { servers: [] });
      const router = await createRouter(config, { listen: false, telemetry: false });
      try {
        const { rows, columns } = await router.sql(query, flags.param);
        process.stdout.write(flags.json ? `${toJson({ columns, rows })}\n` : formatTable(columns, rows));
      } finally {
        await router.close();
      }
    });
}
