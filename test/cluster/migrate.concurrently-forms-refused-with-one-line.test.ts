import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { isShardflakeError } from 'shardflake';
import { shardCreationSql } from '../../packages/shardflake/src/admin/shard-ddl.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { startCli } from '../support/cli.js';

const base = {
  servers: { a: 'postgres://postgres:secret@127.0.0.1:54001/app' },
  catalog: 'a',
  logicalShards: 4,
  epoch: '2024-01-01T00:00:00Z',
  tables: {
    photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint, likes int)',
  },
};
const withMigration = (sql: string | string[]) => ({
  ...base,
  migrations: [{ version: 1, name: 'index', sql }],
});

function refuses(raw: unknown, pattern: RegExp): void {
  assert.throws(
    () => validateConfig(raw, 'cluster.json'),
    (e: unknown) => {
      assert.ok(isShardflakeError(e, 'INVALID_CONFIG'), String(e));
      assert.match(e.message, pattern);
      assert.doesNotMatch(e.message, /\n|secret/);
      return true;
    },
  );
}

describe('CONCURRENTLY in a config', () => {
  const accepted: [string, 'create' | 'drop', string, string][] = [
    [
      'CREATE INDEX CONCURRENTLY photos_likes ON photos (likes);',
      'create',
      'photos_likes',
      'CREATE INDEX photos_likes ON photos (likes)',
    ],
    [
      'create unique index concurrently if not exists Photos_U on photos (user_id) where likes > 0',
      'create',
      'photos_u',
      'create unique index if not exists Photos_U on photos (user_id) where likes > 0',
    ],
    [
      'CREATE INDEX CONCURRENTLY "Mixed_Case" ON photos USING btree (likes)',
      'create',
      'Mixed_Case',
      'CREATE INDEX "Mixed_Case" ON photos USING btree (likes)',
    ],
    [
      'DROP INDEX CONCURRENTLY IF EXISTS photos_likes',
      'drop',
      'photos_likes',
      'DROP INDEX IF EXISTS photos_likes',
    ],
  ];
  for (const [sql, action, index, inTransaction] of accepted) {
    it(`accepts ${sql}: index ${index} as PostgreSQL names it, and a plain form for new shards`, () => {
      const config = validateConfig(withMigration(sql), 'cluster.json');
      const [statement] = config.migrations[0]?.concurrent ?? [];
      assert.deepEqual(
        { action: statement?.action, index: statement?.index, inTransaction: statement?.inTransaction },
        { action, index, inTransaction },
      );
      // A shard created later runs the plain form inside its creation transaction.
      const creation = shardCreationSql(config, 0, 'shard_0000');
      assert.ok(creation.includes(inTransaction));
      assert.doesNotMatch(creation, /CONCURRENTLY/i);
    });
  }

  const refused: [string, string | string[], RegExp][] = [
    ['a nameless build', 'CREATE INDEX CONCURRENTLY ON photos (likes)', /index must be named/],
    ['a nameless build IF NOT EXISTS', 'CREATE INDEX CONCURRENTLY IF NOT EXISTS ON photos (likes)', /named/],
    ['REINDEX', 'REINDEX INDEX CONCURRENTLY photos_likes', /CONCURRENTLY is allowed only as/],
    [
      'DETACH PARTITION',
      'ALTER TABLE photos DETACH PARTITION photos_2024 CONCURRENTLY',
      /CONCURRENTLY is allowed only as/,
    ],
    [
      'CONCURRENTLY in the wrong place',
      'CREATE INDEX photos_likes CONCURRENTLY ON photos (likes)',
      /only as/,
    ],
    ['two indexes dropped', 'DROP INDEX CONCURRENTLY photos_a, photos_b', /one index at a time/],
    ['CASCADE', 'DROP INDEX CONCURRENTLY photos_a CASCADE', /without CASCADE/],
    ['a qualified index', 'DROP INDEX CONCURRENTLY public.photos_a', /schema-qualified/],
    [
      'a name that is not plain',
      'CREATE INDEX CONCURRENTLY "a b" ON photos (likes)',
      /not a plain SQL identifier/,
    ],
    [
      'a mixed migration',
      ['ALTER TABLE photos ADD COLUMN tags text', 'CREATE INDEX CONCURRENTLY photos_tags ON photos (tags)'],
      /mixes CONCURRENTLY statements with others/,
    ],
  ];
  for (const [what, sql, pattern] of refused) {
    it(`refuses ${what}`, () => refuses(withMigration(sql), pattern));
  }

  it('refuses CONCURRENTLY in a table template (it runs in the transaction that creates the table)', () => {
    refuses(
      {
        ...base,
        tables: {
          photos: [
            'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), likes int)',
            'CREATE INDEX CONCURRENTLY photos_likes ON photos (likes)',
          ],
        },
      },
      /tables\.photos uses CONCURRENTLY, which only a migration can/,
    );
  });

  it('cluster migrate with a bad form: one line on stderr, exit 2, before any server is contacted', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'shardflake-concurrently-'));
    const path = join(dir, 'cluster.json');
    await writeFile(path, JSON.stringify(withMigration('CREATE INDEX CONCURRENTLY ON photos (likes)')));
    const run = await startCli(['cluster', 'migrate', '--config', path]).done;
    assert.equal(run.code, 2);
    assert.equal(run.stdout, '');
    assert.match(run.stderr, /^shardflake: error \[INVALID_CONFIG\]: .*index must be named.*\n$/);
    assert.equal(run.stderr.split('\n').length, 2, run.stderr);
    assert.doesNotMatch(run.stderr, /secret/);
  });
});
