import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isShardflakeError } from 'shardflake';
import { shardCreationSql } from '../../packages/shardflake/src/admin/shard-ddl.js';
import { parseConfig, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { badMeanings, badShapes, base } from './config-cases.js';

function rejects(raw: unknown, code: string, pattern: RegExp): void {
  assert.throws(
    () => validateConfig(raw, 'cluster.json'),
    (e: unknown) => {
      assert.ok(isShardflakeError(e), String(e));
      assert.equal(e.code, code);
      assert.match(e.message, pattern);
      assert.doesNotMatch(e.message, /secret/);
      assert.doesNotMatch(e.message, /\n/);
      return true;
    },
  );
}

describe('cluster config', () => {
  it('names the path and what is wrong, in one line without the password, for every bad shape and meaning', () => {
    for (const [what, config, message] of badShapes) {
      assert.throws(
        () => validateConfig(config, 'cluster.json'),
        (e: unknown) => {
          assert.ok(isShardflakeError(e, 'INVALID_CONFIG'), `${what}: ${String(e)}`);
          assert.equal(e.message, message, what);
          return true;
        },
      );
    }
    for (const [what, config, code, message] of badMeanings) {
      assert.throws(
        () => validateConfig(config, 'cluster.json'),
        (e: unknown) => {
          assert.ok(isShardflakeError(e), `${what}: ${String(e)}`);
          assert.equal(e.code, code, what);
          assert.equal(e.message, message, what);
          return true;
        },
      );
    }
    for (const [, , message] of [...badShapes, ...badMeanings.map(([w, c, , m]) => [w, c, m] as const)]) {
      assert.doesNotMatch(message, /secret|\n/);
    }
  });

  it('accepts "$schema" and "comment", which editors and people use', () => {
    const config = validateConfig(
      { $schema: './node_modules/shardflake/config.schema.json', comment: 'two servers', ...base },
      'cluster.json',
    );
    assert.equal(config.logicalShards, 64);
  });

  it('accepts the SPEC example and applies the epoch to the layout', () => {
    const config = validateConfig(base, 'cluster.json');
    assert.equal(config.logicalShards, 64);
    assert.equal(config.epoch, Date.parse('2024-01-01T00:00:00Z'));
    assert.equal(config.layout.epoch, config.epoch);
    assert.deepEqual(
      config.tables.map((t) => t.name),
      ['photos'],
    );
  });

  it("takes nextIdLanguage (default plpgsql, as for a single install) into every new shard's generator, and refuses other values", () => {
    assert.equal(validateConfig(base, 'cluster.json').nextIdLanguage, 'plpgsql');
    const sql = validateConfig({ ...base, nextIdLanguage: 'sql' }, 'cluster.json');
    assert.match(shardCreationSql(sql, 7, 'shard_0007'), /"next_id"\(\) RETURNS bigint\s+LANGUAGE sql/);
    assert.match(
      shardCreationSql(validateConfig(base, 'cluster.json'), 7, 'shard_0007'),
      /"next_id"\(\) RETURNS bigint\s+LANGUAGE plpgsql/,
    );
    rejects(
      { ...base, nextIdLanguage: 'c' },
      'INVALID_CONFIG',
      /^cluster\.json: nextIdLanguage must be one of plpgsql, sql$/,
    );
  });

  it('refuses text that is not JSON', () => {
    assert.throws(
      () => parseConfig('{ "servers": ', 'cluster.json'),
      (e: unknown) => {
        assert.ok(isShardflakeError(e, 'INVALID_CONFIG'));
        assert.match(e.message, /cluster\.json: is not valid JSON/);
        return true;
      },
    );
  });

  it('refuses a catalog that names an unknown server', () => {
    rejects(
      { ...base, catalog: 'c' },
      'UNKNOWN_SERVER',
      /catalog names server "c", which servers does not define \(servers: a, b\)/,
    );
  });

  it('refuses logicalShards outside 1..8192', () => {
    for (const n of [0, 8193, -1, 1.5, '64'])
      rejects({ ...base, logicalShards: n }, 'INVALID_CONFIG', /logicalShards/);
    assert.equal(validateConfig({ ...base, logicalShards: 8192 }).logicalShards, 8192);
    assert.equal(validateConfig({ ...base, logicalShards: 1 }).logicalShards, 1);
  });

  it('refuses a bad epoch', () => {
    for (const epoch of ['yesterday', -5, 1.5, '2999-01-01T00:00:00Z'])
      rejects({ ...base, epoch }, 'INVALID_CONFIG', /epoch/);
  });

  it('refuses URLs that are not postgres:// and never prints a password', () => {
    rejects(
      { ...base, servers: { ...base.servers, b: 'mysql://x' } },
      'INVALID_CONFIG',
      /^cluster\.json: servers\.b needs a postgres:\/\/ URL$/,
    );
  });

  const escapes: [string, string | string[], RegExp][] = [
    ['schema-qualified table', 'CREATE TABLE public.photos (id bigint)', /schema-qualified/],
    ['quoted qualified table', 'CREATE TABLE "public"."photos" (id bigint)', /schema-qualified/],
    ['qualified function', 'CREATE TABLE photos (id bigint DEFAULT other.next_id())', /schema-qualified/],
    ['second statement', 'CREATE TABLE photos (id bigint); DROP TABLE users', /more than one statement/],
    [
      'set search_path',
      'CREATE TABLE photos (id bigint); SET search_path TO public',
      /more than one statement/,
    ],
    ['search_path alone', ['CREATE TABLE photos (id bigint)', 'SET search_path TO public'], /search_path/],
    ['set schema', ['CREATE TABLE photos (id bigint)', 'ALTER TABLE photos SET SCHEMA public'], /SCHEMA/],
    ['temp table', 'CREATE TEMP TABLE photos (id bigint)', /TEMP/],
    ['dollar body', ['CREATE TABLE photos (id bigint)', 'DO $$ BEGIN END $$'], /dollar-quoted/],
    [
      'set_config',
      "CREATE TABLE photos (id bigint DEFAULT length(set_config('search_path', 'public', true)))",
      /set_config/,
    ],
    ['wrong table', 'CREATE TABLE users (id bigint)', /must start with CREATE TABLE photos/],
    ['not a table statement', 'SELECT 1', /must be a table, index/],
  ];
  for (const [what, sql, pattern] of escapes) {
    it(`refuses a table statement that tries to escape its schema: ${what}`, () => {
      rejects({ ...base, tables: { photos: sql } }, 'INVALID_CONFIG', pattern);
    });
  }

  it('allows dots and semicolons inside literals, and indexes after the table', () => {
    const config = validateConfig({
      ...base,
      tables: {
        photos: [
          "CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), caption text DEFAULT 'a.b; c', score numeric DEFAULT 1.5);",
          'CREATE INDEX photos_score ON photos (score)',
        ],
      },
    });
    assert.equal(config.tables[0]?.statements.length, 2);
  });

  it('refuses hostile table names and reserved ones', () => {
    rejects(
      { ...base, tables: { 'x"; DROP': 'CREATE TABLE x (id bigint)' } },
      'INVALID_CONFIG',
      /plain SQL identifier/,
    );
    rejects(
      { ...base, tables: { _shardflake_x: 'CREATE TABLE _shardflake_x (id bigint)' } },
      'INVALID_CONFIG',
      /reserved/,
    );
  });

  it('requires migrations numbered 1, 2, 3 and checks their statements too', () => {
    rejects(
      { ...base, migrations: [{ version: 2, sql: 'ALTER TABLE photos ADD c int' }] },
      'INVALID_CONFIG',
      /migrations\[0\]\.version must be 1, not 2/,
    );
    rejects(
      { ...base, migrations: [{ version: 1, sql: 'ALTER TABLE public.photos ADD c int' }] },
      'INVALID_CONFIG',
      /schema-qualified/,
    );
    const ok = validateConfig({
      ...base,
      migrations: [{ version: 1, name: 'c', sql: 'ALTER TABLE photos ADD c int' }],
    });
    assert.equal(ok.migrations[0]?.version, 1);
  });

  it('takes reference tables apart from sharded ones and refuses a name that is both, a bad name, or a reach out of the schema', () => {
    const plans = 'CREATE TABLE plans (id int PRIMARY KEY, name text NOT NULL)';
    const ok = validateConfig({
      ...base,
      referenceTables: { plans: [plans, 'CREATE INDEX plans_name ON plans (name)'] },
      referenceMigrations: [{ version: 1, name: 'seed', sql: "INSERT INTO plans VALUES (1, 'free')" }],
    });
    assert.deepEqual(ok.referenceTables[0]?.statements.length, 2);
    assert.equal(ok.referenceMigrations[0]?.name, 'seed');
    assert.deepEqual(validateConfig(base).referenceTables, []);
    rejects(
      { ...base, referenceTables: { photos: 'CREATE TABLE photos (id int PRIMARY KEY)' } },
      'INVALID_CONFIG',
      /photos is both a sharded table and a reference table/,
    );
    rejects(
      {
        ...base,
        migrations: [{ version: 1, sql: 'CREATE TABLE plans (id bigint PRIMARY KEY)' }],
        referenceTables: { plans },
      },
      'INVALID_CONFIG',
      /plans is both a sharded table and a reference table/,
    );
    rejects(
      {
        ...base,
        referenceMigrations: [{ version: 1, sql: 'CREATE TABLE photos (id int PRIMARY KEY)' }],
      },
      'INVALID_CONFIG',
      /referenceMigrations\[0\] creates table photos is both/,
    );
    rejects(
      { ...base, referenceTables: { 'pl"ans': plans } },
      'INVALID_CONFIG',
      /referenceTables\["pl\\"ans"\] is not a good reference table name: it must be a plain SQL identifier/,
    );
    rejects({ ...base, referenceTables: { Plans: plans } }, 'INVALID_CONFIG', /lower case/);
    rejects(
      { ...base, referenceTables: { _shardflake_x: 'CREATE TABLE _shardflake_x (id int)' } },
      'INVALID_CONFIG',
      /reserved/,
    );
    rejects(
      { ...base, referenceTables: { plans: 'CREATE TABLE other (id int)' } },
      'INVALID_CONFIG',
      /creates other/,
    );
    rejects(
      { ...base, referenceTables: { plans: 'CREATE TABLE plans (id int); DROP TABLE photos' } },
      'INVALID_CONFIG',
      /./,
    );
    rejects(
      { ...base, referenceTables: { plans: 'CREATE TABLE plans (id int REFERENCES public.users)' } },
      'INVALID_CONFIG',
      /schema-qualified/,
    );
    rejects(
      { ...base, referenceTables: ['plans'] },
      'INVALID_CONFIG',
      /^cluster\.json: referenceTables must map each reference table name to its CREATE TABLE statement$/,
    );
    rejects(
      {
        ...base,
        referenceTables: { plans },
        referenceMigrations: [{ version: 2, sql: 'ALTER TABLE plans ADD c int' }],
      },
      'INVALID_CONFIG',
      /referenceMigrations\[0\]\.version must be 1, not 2/,
    );
    rejects(
      {
        ...base,
        referenceTables: { plans },
        referenceMigrations: [{ version: 1, sql: 'CREATE INDEX CONCURRENTLY plans_n ON plans (name)' }],
      },
      'INVALID_CONFIG',
      /CONCURRENTLY/,
    );
  });
});
