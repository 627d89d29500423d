import type { Command } from 'commander';
import { ShardflakeError } from '../../errors.js';
import { generatorSql } from '../../postgres/generator-sql.js';
import { epochOption } from '../options.js';

/** `--shard`: a whole number (the layout decides the range, and says OUT_OF_RANGE). */
function shardNumber(value: string): number {
  if (!/^[0-9]+$/.test(value.trim())) {
    throw new ShardflakeError(
      'OUT_OF_RANGE',
      `--shard must be a whole number ≥ 0, not ${JSON.stringify(value)}`,
    );
  }
  return Number(value);
}

export function registerSqlCommands(program: Command): void {
  const sql = program.command('sql').description('SQL that shardflake installs into PostgreSQL');
  sql
    .command('generator')
    .description(
      "print the SQL that installs a logical shard's id generator (next_id() and helpers) into a schema; idempotent",
    )
    .requiredOption('--schema <name>', 'the shard schema (a plain identifier)')
    .requiredOption('--shard <n>', 'logical shard number (must fit the layout’s shard field)', shardNumber)
    .option('--epoch <ms>', 'custom epoch: ms since 1970 or an ISO date (default: the layout’s)', epochOption)
    .option('--layout <name>', 'id layout with shard and sequence fields', 'instagram')
    .action((opts: { schema: string; shard: number; epoch?: number; layout: string }) => {
      const body = generatorSql({
        schema: opts.schema,
        shard: opts.shard,
        epoch: opts.epoch,
        layout: opts.layout,
      });
      process.stdout.write(
        `-- shardflake id generator for schema ${opts.schema}, shard ${opts.shard}\nBEGIN;\n\n${body}\nCOMMIT;\n`,
      );
    });
}
