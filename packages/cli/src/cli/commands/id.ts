import { ObjectId } from 'bson';
import type { Command } from 'commander';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { capPerSecond, createGenerator } from 'shardflake/internal/ids/generator.js';
import { assertIdEncoding, formatId, type IdEncoding } from 'shardflake/internal/ids/id-text.js';
import {
  assertIdFormat,
  ID_FORMATS,
  type IdFormat,
  inspect,
  inspectionToJson,
} from 'shardflake/internal/ids/inspect.js';
import {
  type Layout,
  layouts,
  PRESET_NAMES,
  resolveLayout,
  withEpoch,
} from 'shardflake/internal/ids/layout.js';
import { createLsidGenerator } from 'shardflake/internal/ids/lsid-generator.js';
import { monotonicFactory } from 'ulid';
import { v4 as uuidv4, v7 as uuidv7 } from 'uuid';
import { epochOption } from './options.js';

/** `id new --format`: 64-bit ids of the chosen layout, or one of the other formats. */
export const NEW_FORMATS = ['int64', 'lsid', 'ulid', 'uuidv7', 'uuidv4', 'objectid'] as const;
type NewFormat = (typeof NEW_FORMATS)[number];

const MAX_COUNT = 10_000_000;
/** Options that set a fixed field of a layout (or LSID's worker). */
const FIELD_OPTIONS = ['shard', 'worker', 'process', 'machine'] as const;

function wholeNumber(flag: string) {
  return (value: string): number => {
    if (!/^[0-9]+$/.test(value.trim()) || !Number.isSafeInteger(Number(value))) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `${flag} must be a whole number ≥ 0, not ${JSON.stringify(value)}`,
      );
    }
    return Number(value);
  };
}

function countOption(value: string): number {
  const count = /^[0-9]+$/.test(value.trim()) ? Number(value) : Number.NaN;
  if (!(Number.isSafeInteger(count) && count >= 1 && count <= MAX_COUNT)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--count must be a whole number from 1 to ${MAX_COUNT}, not ${JSON.stringify(value)}`,
    );
  }
  return count;
}

function formatOption(value: string): NewFormat {
  if (!(NEW_FORMATS as readonly string[]).includes(value)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--format must be one of ${NEW_FORMATS.join(', ')}, not ${JSON.stringify(value)}`,
    );
  }
  return value as NewFormat;
}

/**
 * The layout `id inspect` decodes 64-bit ids with: a cluster's (its config's layout with its epoch: the router
 * refuses a config whose epoch or layout differ from the catalog's, so the config's are the cluster's), or the
 * one --layout and --epoch name. Both at once is a mistake: a cluster's ids read with another epoch decode to
 * another date.
 */
async function inspectLayout(
  opts: { layout: string; epoch?: number; config?: string },
  given: (option: string) => boolean,
): Promise<Layout> {
  if (opts.config === undefined) return chosenLayout(opts.layout, opts.epoch);
  const clash = ['layout', 'epoch'].find(given);
  if (clash)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--config gives the cluster's layout and epoch; leave out --${clash}`,
    );
  // The config module (and its dependencies) is loaded only when a config is given.
  const { loadConfig } = await import('shardflake/internal/config/config.js');
  return (await loadConfig(opts.config)).layout;
}

function chosenLayout(name: string, epoch: number | undefined): Layout {
  const layout = resolveLayout(name);
  return epoch === undefined ? layout : withEpoch(layout, epoch);
}

interface NewOptions {
  layout: string;
  epoch?: number;
  count: number;
  format: NewFormat;
  encoding: IdEncoding;
  shard?: number;
  worker?: number;
  process?: number;
  machine?: number;
}

/** A function that returns the next id as text, for the chosen format. */
function idSource(opts: NewOptions): () => string {
  const given = FIELD_OPTIONS.filter((name) => opts[name] !== undefined);
  if (opts.format === 'int64') {
    const layout = chosenLayout(opts.layout, opts.epoch);
    for (const name of given) {
      if (!layout.field(name)) {
        const fixed = layout.fields
          .filter((f) => f.kind !== 'time' && f.kind !== 'sequence')
          .map((f) => `--${f.name}`);
        throw new ShardflakeError(
          'INVALID_ARGUMENT',
          `layout ${layout.name} has no ${name} field (it takes ${fixed.join(', ') || 'no field options'})`,
        );
      }
    }
    // Fixed fields not given default to 0 on the command line (the library asks for them explicitly).
    const fields: Record<string, number> = {};
    for (const field of layout.fields) {
      if (field.kind === 'time' || field.kind === 'sequence') continue;
      fields[field.name] = (opts as unknown as Record<string, number | undefined>)[field.name] ?? 0;
    }
    const generator = createGenerator({ layout, ...fields });
    return () => formatId(generator.next(), opts.encoding);
  }
  const allowed = opts.format === 'lsid' ? ['worker'] : [];
  const wrong = given.filter((name) => !allowed.includes(name));
  if (wrong.length > 0) {
    throw new ShardflakeError('INVALID_ARGUMENT', `--${wrong[0]} does not apply to --format ${opts.format}`);
  }
  switch (opts.format) {
    case 'lsid': {
      const generator = createLsidGenerator({ worker: opts.worker });
      return () => generator.next();
    }
    case 'ulid': {
      const next = monotonicFactory();
      return () => next();
    }
    case 'uuidv7':
      return () => uuidv7();
    case 'uuidv4':
      return () => uuidv4();
    case 'objectid':
      return () => new ObjectId().toHexString();
  }
}

function layoutRow(layout: Layout) {
  return {
    name: layout.name,
    epoch: new Date(layout.epoch).toISOString(),
    timeUnitMs: layout.timeUnitMs,
    bits: layout.totalBits,
    fields: layout.fields.map((f) => ({
      name: f.name,
      kind: f.kind,
      bits: f.bits,
      shift: f.shift,
      max: f.max.toString(),
    })),
    idsPerSecondPerGenerator: capPerSecond(layout),
    timeRunsOutAt: layout.exhaustsAt.toISOString(),
    signedOverflowAt: layout.signedOverflowAt ? layout.signedOverflowAt.toISOString() : null,
  };
}

export function registerIdCommands(program: Command): void {
  const id = program.command('id').description('generate, inspect and describe ids (no database needed)');

  id.command('new')
    .description('generate ids, one per line')
    .option('--layout <name>', `64-bit layout: ${PRESET_NAMES.join(', ')}`, 'instagram')
    .option('--epoch <ms>', "custom epoch: ms since 1970 or an ISO date (default: the layout's)", epochOption)
    .option('--shard <n>', 'shard field (instagram); default 0', wholeNumber('--shard'))
    .option(
      '--worker <n>',
      'worker field (snowflake, discord; LSID worker id, default from the MAC)',
      wholeNumber('--worker'),
    )
    .option('--process <n>', 'process field (discord); default 0', wholeNumber('--process'))
    .option('--machine <n>', 'machine field (sonyflake); default 0', wholeNumber('--machine'))
    .option('--count <n>', `how many ids (1..${MAX_COUNT})`, countOption, 1)
    .option('--format <format>', `id format: ${NEW_FORMATS.join(', ')}`, formatOption, 'int64')
    .option(
      '--encoding <encoding>',
      'text of 64-bit ids: decimal, base62, base32 (Crockford)',
      assertIdEncoding,
      'decimal',
    )
    .action((opts: NewOptions) => {
      const next = idSource(opts);
      const chunk: string[] = [];
      for (let i = 0; i < opts.count; i++) {
        chunk.push(next());
        if (chunk.length === 10_000) {
          process.stdout.write(`${chunk.join('\n')}\n`);
          chunk.length = 0;
        }
      }
      if (chunk.length > 0) process.stdout.write(`${chunk.join('\n')}\n`);
    });

  id.command('inspect')
    .description(
      'detect the format of ids (LSID, ULID, UUID, ObjectId, 64-bit in decimal, base62 or base32) and explain their fields',
    )
    .argument('<ids...>', 'ids to explain')
    .option('--layout <name>', `layout for 64-bit ids: ${PRESET_NAMES.join(', ')}`, 'instagram')
    .option('--epoch <ms>', 'custom epoch for 64-bit ids: ms since 1970 or an ISO date', epochOption)
    .option(
      '--format <format>',
      `read every id as ${ID_FORMATS.join(', ')} instead of detecting it`,
      assertIdFormat,
    )
    .option(
      '--encoding <encoding>',
      'read every id as a 64-bit id in this text: decimal, base62, base32 (digits-only ids are otherwise decimal)',
      assertIdEncoding,
    )
    .option(
      '--config <file>',
      "decode 64-bit ids with a cluster's layout and epoch, from its config file (instead of --layout and --epoch)",
    )
    .option('--json', 'one JSON object per id and line')
    .action(
      async (
        ids: string[],
        opts: {
          layout: string;
          epoch?: number;
          config?: string;
          format?: IdFormat;
          encoding?: IdEncoding;
          json?: boolean;
        },
        command: Command,
      ) => {
        const layout = await inspectLayout(opts, (name) => command.getOptionValueSource(name) === 'cli');
        const options = { layout, format: opts.format, encoding: opts.encoding };
        // Every id is checked before anything is printed: an invalid one fails the whole command with one line.
        const results = ids.map((text) => inspect(text, options));
        const out = results.map((result) =>
          opts.json
            ? JSON.stringify(inspectionToJson(result))
            : [
                `${result.input}  ${result.format}  ${result.timestamp ? result.timestamp.toISOString() : '(no timestamp)'}`,
                ...result.explanation.map((line) => `  ${line}`),
              ].join('\n'),
        );
        process.stdout.write(`${out.join('\n')}\n`);
      },
    );

  id.command('layouts')
    .description("each preset layout's fields, capacity and the dates its ids run out")
    .option('--json', 'one JSON object per layout and line')
    .action((opts: { json?: boolean }) => {
      const rows = Object.values(layouts).map(layoutRow);
      if (opts.json) {
        process.stdout.write(`${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
        return;
      }
      const lines = rows.map((r) =>
        [
          `${r.name}: ${r.bits} bits, epoch ${r.epoch}, tick ${r.timeUnitMs} ms`,
          `  fields (high → low): ${r.fields.map((f) => `${f.name} ${f.bits} bits @${f.shift}`).join(' | ')}`,
          `  one generator: ${r.idsPerSecondPerGenerator.toLocaleString('en-US')} ids/s at most`,
          `  time field runs out: ${r.timeRunsOutAt}`,
          `  ids turn negative in a signed bigint: ${r.signedOverflowAt ?? 'never (the sign bit stays 0)'}`,
        ].join('\n'),
      );
      process.stdout.write(`${lines.join('\n')}\n`);
    });
}
