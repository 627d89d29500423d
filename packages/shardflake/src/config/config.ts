/*
 * config/: What a cluster is declared to be: the config file's schema and validation, one file per section
 * (servers.ts, tables.ts, lookups.ts, reference.ts), the rules a shard's statements must follow, the secrets taken
 * from the environment, and the contract of a `cluster verify` check. Data and checks only: nothing here connects.
 *
 * May import: errors, ids, postgres.
 */
import { readFile } from 'node:fs/promises';
import * as v from 'valibot';
import { expectObject, expectString, kindOf, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { type Layout, layouts, PRESET_NAMES, resolveLayout, withEpoch } from '../ids/layout.js';
import {
  DEFAULT_GENERATOR_LANGUAGE,
  GENERATOR_LANGUAGES,
  type GeneratorLanguage,
} from '../postgres/generator-sql.js';
import { type AdoptConfig, adoptFields, resolveAdopt } from './adopt.js';
import { pathOf, section } from './fields.js';
import { type LookupDefinition, lookupsFields, resolveLookups } from './lookups.js';
import { type ReferenceConfig, referenceFields, resolveReference } from './reference.js';
import type { Migration, TableTemplate } from './schema-templates.js';
import { resolveServers, serversFields } from './servers.js';
import { resolveTables, tablesFields } from './tables.js';

/**
 * The cluster config file (JSON), as SPEC section 2 fixes it, plus optional fields:
 *
 * ```json
 * {
 *   "servers": { "a": "postgres://…", "b": "postgres://…" },
 *   "catalog": "a",
 *   "logicalShards": 2048,
 *   "epoch": "2024-01-01T00:00:00Z",          // ISO date or ms since 1970; default: the layout's own epoch
 *   "layout": "instagram",                     // a preset with a shard field (default instagram)
 *   "schemaPrefix": "shard_",                  // shard 42 lives in schema shard_0042
 *   "nextIdLanguage": "plpgsql",               // how each shard's next_id() is written: plpgsql (default) or sql
 *   "tables": { "photos": "CREATE TABLE photos (…)" },   // a statement, or a list (table first, then indexes)
 *   "migrations": [ { "version": 1, "name": "likes count", "sql": "ALTER TABLE photos ADD …" } ],
 *   "lookups": { "user_email": { "table": "users", "column": "email", "unique": true } }   // see config/lookups.ts
 * }
 * ```
 */
export const MAX_LOGICAL_SHARDS = 8192;

/** Shard 42 lives in schema shard_0042 unless the config says otherwise. */
export const DEFAULT_SCHEMA_PREFIX = 'shard_';

const shardFieldOf = (layout: Layout) => layout.fields.find((f) => f.kind === 'shard');
/** The layout presets a cluster can use: those with a shard field. */
const CLUSTER_LAYOUTS = PRESET_NAMES.filter((name) => shardFieldOf(layouts[name]));

export type { Migration, TableTemplate };

/**
 * A validated cluster config, as `loadConfig`, `parseConfig` and `validateConfig` return it: servers and their
 * nodes, the catalog server, the logical shards, the id layout and epoch, the table templates and migrations,
 * reference tables and lookups.
 */
export interface ClusterConfig extends ReferenceConfig {
  /** Each server's first node URL (its primary when the config lists several): for display and one-node code. */
  servers: Record<string, string>;
  /**
   * Every node URL of each server, in config order: one URL, or a primary and its streaming replicas (roles are
   * found at run time with pg_is_in_recovery(), so the order does not say which one is the primary).
   */
  nodes: Record<string, string[]>;
  /**
   * The name of the server (a key of `servers`) whose database holds the catalog: the shard map and leases.
   */
  catalog: string;
  /** How many logical shards, 1 to 8192 (fewer when the layout's shard field is smaller); fixed once made. */
  logicalShards: number;
  /** Epoch in ms since 1970. */
  epoch: number;
  /** The id layout with the config's epoch applied. */
  layout: Layout;
  /** Prefix of the shard schemas: shard 42 lives in `<prefix>0042` (default `shard_`). */
  schemaPrefix: string;
  /** How new shards' next_id() is written (see GeneratorSqlOptions.language). */
  nextIdLanguage: GeneratorLanguage;
  /** The sharded tables, in config order, created in every shard schema by `initCluster`. */
  tables: TableTemplate[];
  /** The config's numbered migrations, in version order from 1; an empty list when the config has none. */
  migrations: Migration[];
  /** Columns found without their shard key (src/lookups/). */
  lookups: LookupDefinition[];
  /** The live database this cluster is adopted from, and how its tables are placed (src/adopt/). */
  adopt?: AdoptConfig;
  /** Where the config came from (file path), for messages. */
  source: string;
  /**
   * Ids below this bound are old (adopted rows' bigserial ids) and allowed in any shard (postgres/id-shard-rule.ts).
   * Never from the file: commands that make shard DDL read it from the catalog (admin/migrations.ts).
   */
  oldIdsBelow?: bigint | null;
}

// Messages of the config's own fields: what is allowed, and what the file had instead (none of these is a URL).
const shardsMessage = (issue: v.BaseIssue<unknown>) =>
  `must be a whole number from 1 to ${MAX_LOGICAL_SHARDS}, not ${shown(issue.input)}`;
const epochMessage = (input: unknown) =>
  `must be an ISO 8601 date such as "2024-01-01T00:00:00Z" or whole milliseconds since 1970, not ${shown(input)}`;
const prefixMessage = 'must be lower-case letters, digits or _ (at most 41), starting with a letter or _';
const epochIssue = (issue: v.BaseIssue<unknown>) => epochMessage(issue.input);

/** The config's own fields: how ids are made and where shards live. The other sections come from their modules. */
const clusterFields = {
  catalog: v.pipe(
    v.string('must name one of the servers'),
    v.description('The server that holds the catalog (which shard lives where)'),
  ),
  logicalShards: v.pipe(
    v.number(shardsMessage),
    v.integer(shardsMessage),
    v.minValue(1, shardsMessage),
    v.maxValue(MAX_LOGICAL_SHARDS, shardsMessage),
    v.description(
      `How many logical shards, 1 to ${MAX_LOGICAL_SHARDS} (fewer when the layout's shard field is smaller); fixed once the cluster is made`,
    ),
  ),
  epoch: v.optional(
    v.pipe(
      v.union(
        [
          v.pipe(v.string(), v.regex(/^\d{4}-\d{2}-\d{2}/, epochIssue)),
          v.pipe(v.number(), v.safeInteger(epochIssue), v.minValue(0, epochIssue)),
        ],
        epochIssue,
      ),
      v.description(
        'The ids\' epoch: an ISO 8601 date such as "2024-01-01T00:00:00Z" or whole milliseconds since 1970 (default: the layout\'s own)',
      ),
    ),
  ),
  layout: v.optional(
    v.pipe(
      v.picklist(
        CLUSTER_LAYOUTS,
        (issue) =>
          `must be a preset with a shard field (${CLUSTER_LAYOUTS.join(', ')}), not ${shown(issue.input)}`,
      ),
      v.description('The id layout: a preset with a shard field (default instagram)'),
    ),
  ),
  schemaPrefix: v.optional(
    v.pipe(
      v.string(prefixMessage),
      v.regex(/^[a-z_][a-z0-9_]{0,40}$/, prefixMessage),
      v.description('Shard 42 lives in schema <prefix>0042 (default shard_)'),
    ),
  ),
  nextIdLanguage: v.optional(
    v.pipe(
      v.picklist(GENERATOR_LANGUAGES, `must be one of ${GENERATOR_LANGUAGES.join(', ')}`),
      v.description(`How each new shard's next_id() is written (default ${DEFAULT_GENERATOR_LANGUAGE})`),
    ),
  ),
};

/**
 * The whole config file's schema: its own fields and each section's, composed. It is what validateConfig checks
 * first and what scripts/config-schema.mjs turns into the shipped config.schema.json.
 */
export const configSchema = section(
  {
    $schema: v.optional(
      v.pipe(
        v.string('must be a string (the path or URL of a JSON Schema)'),
        v.description('The JSON Schema this file follows, for editors (shardflake ignores it)'),
      ),
    ),
    comment: v.optional(
      v.pipe(v.string('must be a string'), v.description('Free text for people (shardflake ignores it)')),
    ),
    ...serversFields,
    ...clusterFields,
    ...tablesFields,
    ...referenceFields,
    ...lookupsFields,
    ...adoptFields,
  },
  'must be a JSON object',
);

/** The first problem valibot found, as one line: `cluster.json: servers.b needs a postgres:// URL …`. */
function issueMessage(issue: v.BaseIssue<unknown>, source: string): string {
  const path = pathOf(issue);
  return `${source}: ${path === '' ? '' : `${path} `}${issue.message}`;
}

function bad(source: string, message: string): ShardflakeError {
  return new ShardflakeError('INVALID_CONFIG', `${source}: ${message}`);
}

function parseEpoch(value: string | number | undefined, layout: Layout, source: string, now: number): number {
  if (value === undefined) return layout.epoch;
  const ms = typeof value === 'number' ? value : Date.parse(value);
  if (!Number.isSafeInteger(ms) || ms < 0) throw bad(source, `epoch ${epochMessage(value)}`);
  if (ms > now) {
    throw bad(source, `epoch ${new Date(ms).toISOString()} is in the future; ids before it cannot be made`);
  }
  return ms;
}

/**
 * Validates a parsed config object; every problem is an INVALID_CONFIG or UNKNOWN_SERVER with one line naming
 * where (`servers.b`, `lookups.user_email.column`) and what is wrong. First the schema (the shape, as the JSON
 * Schema says it), then each section's second pass: what needs the rest of the config, the environment or a
 * tokenizer.
 */
export function validateConfig(raw: unknown, source = 'config', now = Date.now()): ClusterConfig {
  // Every schema above has its own message; the fallback never shows the value (it could be a URL with a password).
  const parsed = v.safeParse(configSchema, raw, {
    abortEarly: true,
    message: (issue) => `must be ${issue.expected ?? 'something else'}`,
  });
  if (!parsed.success) {
    throw new ShardflakeError('INVALID_CONFIG', issueMessage(parsed.issues[0], source));
  }
  const file = parsed.output;
  const { servers, nodes } = resolveServers(file, source);
  if (!(file.catalog in servers)) {
    throw new ShardflakeError(
      'UNKNOWN_SERVER',
      `${source}: catalog names server ${shown(file.catalog)}, which servers does not define (servers: ${Object.keys(servers).join(', ')})`,
    );
  }
  const layoutName = file.layout ?? 'instagram';
  const base = resolveLayout(layoutName);
  const limit = Math.min(MAX_LOGICAL_SHARDS, Number(shardFieldOf(base)?.max ?? 0) + 1);
  if (file.logicalShards > limit) {
    throw bad(
      source,
      `logicalShards must be a whole number from 1 to ${limit} (the most layout ${layoutName} can number), not ${file.logicalShards}`,
    );
  }
  const epoch = parseEpoch(file.epoch, base, source, now);
  const { tables, migrations } = resolveTables(file, source);
  const reference = resolveReference(file, source, { tables, migrations });
  const adopt = resolveAdopt(
    file,
    tables.map((t) => t.name),
    reference.referenceTables.map((t) => t.name),
    Object.keys(servers),
    source,
  );
  return {
    servers,
    nodes,
    catalog: file.catalog,
    logicalShards: file.logicalShards,
    epoch,
    layout: withEpoch(base, epoch),
    schemaPrefix: file.schemaPrefix ?? DEFAULT_SCHEMA_PREFIX,
    nextIdLanguage: file.nextIdLanguage ?? DEFAULT_GENERATOR_LANGUAGE,
    tables,
    migrations,
    ...reference,
    lookups: resolveLookups(
      file,
      tables.map((t) => t.name),
      source,
    ),
    ...(adopt ? { adopt } : {}),
    source,
  };
}

/** Parses config text (JSON). */
export function parseConfig(text: string, source = 'config'): ClusterConfig {
  if (typeof text !== 'string') throw bad(source, `must be JSON text, not ${kindOf(text)}`);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw bad(source, `is not valid JSON (${(error as Error).message})`);
  }
  return validateConfig(raw, source);
}

/** Reads and validates a config file. */
export async function loadConfig(path: string): Promise<ClusterConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'unreadable';
    throw new ShardflakeError('INVALID_CONFIG', `cannot read config file ${path} (${code})`, {
      cause: error,
    });
  }
  return parseConfig(text, path);
}

/** Schema name of a logical shard: prefix + shard number zero-padded to 4 digits (`shard_0042`). */
export function shardSchema(config: Pick<ClusterConfig, 'schemaPrefix'>, shard: number): string {
  expectString(expectObject(config, 'shardSchema: config').schemaPrefix, 'shardSchema: config.schemaPrefix');
  if (!Number.isSafeInteger(shard) || shard < 0) {
    throw new ShardflakeError('UNKNOWN_SHARD', `logical shard ${shown(shard)} is not a whole number from 0`);
  }
  return `${config.schemaPrefix}${String(shard).padStart(4, '0')}`;
}

/** The schema version a fully migrated shard has. */
export function targetVersion(config: Pick<ClusterConfig, 'migrations'>): number {
  return config.migrations.length;
}
