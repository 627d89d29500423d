import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isShardflakeError, validateConfig } from 'shardflake';

/** A sharded table without a primary key is a config error with the reason, not a move that fails months later. */
const base = {
  servers: { a: 'postgres://u@localhost/db' },
  catalog: 'a',
  logicalShards: 4,
};
const config = (tables: Record<string, unknown>, migrations?: unknown[]) =>
  validateConfig({ ...base, tables, ...(migrations ? { migrations } : {}) }, 'cfg');

describe('config: every sharded table has a primary key', () => {
  it('refuses a table without one, saying which table, where, and why', () => {
    assert.throws(
      () => config({ photos: 'CREATE TABLE photos (id bigint DEFAULT next_id(), caption text)' }),
      (e: unknown) =>
        isShardflakeError(e, 'INVALID_CONFIG') &&
        e.message ===
          'cfg: tables.photos: table photos has no primary key; every sharded table needs one (shard moves replicate updates and deletes by it, and get/update/delete find rows by it): add e.g. "id bigint PRIMARY KEY DEFAULT next_id()"',
    );
  });

  it('does not count "primary key" inside a literal or a comment', () => {
    for (const sql of [
      "CREATE TABLE notes (id bigint, body text DEFAULT 'primary key')",
      'CREATE TABLE notes (id bigint /* primary key */, body text)',
      'CREATE TABLE notes (id bigint, body text) -- primary key later',
    ])
      assert.throws(() => config({ notes: sql }), /table notes has no primary key/, sql);
  });

  it('refuses a table created by a migration without one', () => {
    assert.throws(
      () =>
        config({ photos: 'CREATE TABLE photos (id bigint PRIMARY KEY)' }, [
          { version: 1, name: 'tags', sql: 'CREATE TABLE tags (name text NOT NULL)' },
        ]),
      /cfg: migrations\[0\]: table tags has no primary key/,
    );
  });

  it('accepts column, table and composite keys, and a key added by a later statement or migration', () => {
    config(
      {
        a: 'CREATE TABLE a (id bigint PRIMARY KEY DEFAULT next_id())',
        b: 'CREATE TABLE IF NOT EXISTS b (x bigint, y bigint, PRIMARY KEY (x, y))',
        c: 'CREATE UNLOGGED TABLE c (id bigint, CONSTRAINT c_pk PRIMARY KEY (id))',
        d: ['CREATE TABLE d (id bigint NOT NULL)', 'ALTER TABLE d ADD PRIMARY KEY (id)'],
        e: 'CREATE TABLE e (id bigint NOT NULL)',
      },
      [
        {
          version: 1,
          name: 'key e',
          sql: 'ALTER TABLE IF EXISTS ONLY e ADD CONSTRAINT e_pk PRIMARY KEY (id)',
        },
      ],
    );
  });
});
