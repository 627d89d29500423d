import { randomFillSync } from 'node:crypto';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { createGenerator } from 'shardflake/internal/ids/generator.js';
import { lsid } from 'shardflake/internal/ids/lsid.js';
import { ulidToUUID, ulid as ulidWith } from 'ulid';
import { v4 as uuidv4, v7 as uuidv7 } from 'uuid';

/**
 * The id types the insert benchmark compares, as data: how each is stored (Postgres and InnoDB column types),
 * where its value comes from (the database, or the application before the INSERT), and how to make one.
 * Adding a type is adding an entry here; the runners know nothing about any particular type.
 */

/** Where the key is made: `server` types use the column DEFAULT, `app` types are bound as a parameter. */
export type KeySource = 'server' | 'app';

export interface IdType {
  readonly name: string;
  readonly description: string;
  readonly source: KeySource;
  /** Postgres column definition of the key (for `server` types including its DEFAULT). */
  readonly pgColumn: string;
  /** Element type for `unnest($1::TYPE[])` when bulk-loading an `app` key. */
  readonly pgArrayType?: string;
  /** InnoDB column definition, or undefined when the type has no meaningful MariaDB form. */
  readonly mysqlColumn?: string;
  /** Key size in bytes as stored (before index-tuple alignment). */
  readonly keyBytes: number;
  /** Makes one key value for Postgres (`app` types only). */
  readonly pgValue?: () => unknown;
  /** Makes one key value for MariaDB (`app` types, and server types emulated app-side there). */
  readonly mysqlValue?: () => unknown;
}

export const ID_TYPE_NAMES = [
  'bigserial',
  'instagram',
  'snowflake',
  'lsid-uuid',
  'lsid-bytea',
  'lsid-text',
  'ulid-uuid',
  'ulid-text',
  'uuidv4',
  'uuidv7',
] as const;
export type IdTypeName = (typeof ID_TYPE_NAMES)[number];

/** The paper compared UUID, ULID and LSID, written as strings (its figures 1–3). */
export const PAPER_TYPES: readonly IdTypeName[] = ['uuidv4', 'ulid-text', 'lsid-text'];

/** Schema that holds the instagram type's `next_id()` in the benchmark database. */
export const GENERATOR_SCHEMA = 'bench_ids';
const BENCH_SHARD = 1;
const BENCH_WORKER = 1;

const hexUuid = (bytes: Uint8Array): Buffer => Buffer.from(bytes);
const uuidBytes = (uuid: string): Buffer => Buffer.from(uuid.replaceAll('-', ''), 'hex');

/**
 * The ulid package draws each of its 16 random characters with its own getRandomValues call (~100 µs per id
 * here), which would make the ULID rows look slow for a reason that has nothing to do with the database. The
 * same CSPRNG, read 4 KiB at a time, costs ~2 µs.
 */
function bufferedRandom(): () => number {
  const buffer = new Uint8Array(4096);
  let at = buffer.length;
  return () => {
    if (at === buffer.length) {
      randomFillSync(buffer);
      at = 0;
    }
    return (buffer[at++] as number) / 256;
  };
}
const ulidRandom = bufferedRandom();
const ulid = (): string => ulidWith(undefined, ulidRandom);

/** Builds the id types, each with its own generator state. */
export function idTypes(): Map<IdTypeName, IdType> {
  const snowflake = createGenerator({ layout: 'snowflake', worker: BENCH_WORKER });
  const instagram = createGenerator({ layout: 'instagram', shard: BENCH_SHARD });
  const list: (IdType & { name: IdTypeName })[] = [
    {
      name: 'bigserial',
      description: 'sequence in Postgres (AUTO_INCREMENT in InnoDB): the sequential floor',
      source: 'server',
      pgColumn: 'bigserial PRIMARY KEY',
      mysqlColumn: 'BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY',
      keyBytes: 8,
    },
    {
      name: 'instagram',
      description: `next_id() in Postgres (shard ${BENCH_SHARD}); app-side instagram layout on InnoDB`,
      source: 'server',
      pgColumn: `bigint PRIMARY KEY DEFAULT ${GENERATOR_SCHEMA}.next_id()`,
      mysqlColumn: 'BIGINT NOT NULL PRIMARY KEY',
      keyBytes: 8,
      mysqlValue: () => instagram.next().toString(),
    },
    {
      name: 'snowflake',
      description: `Twitter layout, app-side generator (worker ${BENCH_WORKER})`,
      source: 'app',
      pgColumn: 'bigint PRIMARY KEY',
      pgArrayType: 'bigint',
      mysqlColumn: 'BIGINT NOT NULL PRIMARY KEY',
      keyBytes: 8,
      pgValue: () => snowflake.next().toString(),
      mysqlValue: () => snowflake.next().toString(),
    },
    {
      name: 'lsid-uuid',
      description: 'LSID in its sort-preserving uuid form',
      source: 'app',
      pgColumn: 'uuid PRIMARY KEY',
      pgArrayType: 'uuid',
      mysqlColumn: 'BINARY(16) NOT NULL PRIMARY KEY',
      keyBytes: 16,
      pgValue: () => lsid.toUuid(lsid.generate()),
      mysqlValue: () => uuidBytes(lsid.toUuid(lsid.generate())),
    },
    {
      name: 'lsid-bytea',
      description: 'LSID as its 12 bytes',
      source: 'app',
      pgColumn: 'bytea PRIMARY KEY',
      pgArrayType: 'bytea',
      mysqlColumn: 'BINARY(12) NOT NULL PRIMARY KEY',
      keyBytes: 12,
      pgValue: () => hexUuid(lsid.toBytes(lsid.generate())),
      mysqlValue: () => hexUuid(lsid.toBytes(lsid.generate())),
    },
    {
      name: 'lsid-text',
      description: 'LSID as its 22-character text, as the paper stored it',
      source: 'app',
      pgColumn: 'text COLLATE "C" PRIMARY KEY',
      pgArrayType: 'text',
      mysqlColumn: 'CHAR(22) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY',
      keyBytes: 22,
      pgValue: () => lsid.generate(),
      mysqlValue: () => lsid.generate(),
    },

    {
      name: 'ulid-uuid',
      description: 'ULID stored in a uuid column (same 128 bits, same order)',
      source: 'app',
      pgColumn: 'uuid PRIMARY KEY',
      pgArrayType: 'uuid',
      mysqlColumn: 'BINARY(16) NOT NULL PRIMARY KEY',
      keyBytes: 16,
      pgValue: () => ulidToUUID(ulid()),
      mysqlValue: () => uuidBytes(ulidToUUID(ulid())),
    },
    {
      name: 'ulid-text',
      description: 'ULID as its 26-character text, as the paper stored it',
      source: 'app',
      pgColumn: 'text COLLATE "C" PRIMARY KEY',
      pgArrayType: 'text',
      mysqlColumn: 'CHAR(26) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY',
      keyBytes: 26,
      pgValue: () => ulid(),
      mysqlValue: () => ulid(),
    },
    {
      name: 'uuidv4',
      description: 'random UUID (v4) in a uuid column',
      source: 'app',
      pgColumn: 'uuid PRIMARY KEY',
      pgArrayType: 'uuid',
      mysqlColumn: 'BINARY(16) NOT NULL PRIMARY KEY',
      keyBytes: 16,
      pgValue: () => uuidv4(),
      mysqlValue: () => uuidBytes(uuidv4()),
    },
    {
      name: 'uuidv7',
      description: 'time-ordered UUID (v7) in a uuid column',
      source: 'app',
      pgColumn: 'uuid PRIMARY KEY',
      pgArrayType: 'uuid',
      mysqlColumn: 'BINARY(16) NOT NULL PRIMARY KEY',
      keyBytes: 16,
      pgValue: () => uuidv7(),
      mysqlValue: () => uuidBytes(uuidv7()),
    },
  ];
  return new Map<IdTypeName, IdType>(list.map((t) => [t.name, t]));
}

/** Parses `--types a,b,…` against the known names. */
export function parseTypeList(text: string): IdTypeName[] {
  const names = text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (names.length === 0) throw new ShardflakeError('INVALID_ARGUMENT', '--types names no id type');
  for (const name of names) {
    if (!(ID_TYPE_NAMES as readonly string[]).includes(name)) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `unknown id type "${name}": choose from ${ID_TYPE_NAMES.join(', ')}`,
      );
    }
  }
  return [...new Set(names)] as IdTypeName[];
}
