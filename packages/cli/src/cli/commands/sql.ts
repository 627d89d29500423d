import type { Command } from 'commander';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import {
  DEFAULT_GENERATOR_LANGUAGE,
  GENERATOR_LANGUAGES,
  type GeneratorLanguage,
  generatorSql,
} from 'shardflake/internal/postgres/generator-sql.js';
import { epochOption } from './options.js';

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

function language(value: string): GeneratorLanguage {
  if (!(GENERATOR_LANGUAGES as readonly string[]).includes(value)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--language must be one of ${GENERATOR_LANGUAGES.join(', ')}`,
    );
  }
  return value as GeneratorLanguage;
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
    .option('--layout <name>', 'id layout shaped time | shard | sequence', 'instagram')
    .option(
      '--language <name>',
      'how next_id() is written: plpgsql (nothing to plan per statement: unprepared single-row inserts, most clients) or sql (inlined: bulk INSERT … SELECT and named prepared statements)',
      language,
      DEFAULT_GENERATOR_LANGUAGE,
    )
    .option(
      '--replace',
      'take over a next_id() in the schema that shardflake did not install (default: refuse)',
    )
    .action(
      (opts: {
        schema: string;
        shard: number;
        epoch?: number;
        layout: string;
        language: GeneratorLanguage;
        replace?: boolean;
      }) => {
        const body = generatorSql({
          schema: opts.schema,
          shard: opts.shard,
          epoch: opts.epoch,
          layout: opts.layout,
          language: opts.language,
          replace: opts.replace === true,
        });
        process.stdout.write(
          `-- shardflake id generator for schema ${opts.schema}, shard ${opts.shard}\nBEGIN;\n\n${body}\nCOMMIT;\n`,
        );
      },
    );
}
