import assert from 'node:assert/strict';
import { test } from 'node:test';
import { oldIdsBoundary } from '../../packages/shardflake/src/adopt/boundary.js';
import { buildModel } from '../../packages/shardflake/src/adopt/model.js';
import { planAdoption } from '../../packages/shardflake/src/adopt/plan.js';
import { readSourceSchema } from '../../packages/shardflake/src/adopt/source-schema.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { useServers } from '../support/postgres.js';
import { SOURCE_SQL, sourceSnapshot, withClient } from './fixture.js';

test('adopt plan: refuses in one line each table it cannot place, names what it drops, and writes nothing', async () => {
  const [server] = await useServers(1);
  const url = (server as { url: string }).url;
  await withClient(url, (c) =>
    c.query(`${SOURCE_SQL}
      CREATE TABLE audit_log (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(), what text);
      CREATE TABLE drafts (id bigserial PRIMARY KEY, user_id bigint REFERENCES users (id), body text);
      CREATE TABLE tags (name text, photo_id bigint NOT NULL REFERENCES photos (id));`),
  );
  const before = await sourceSnapshot(url);
  const servers = { a: 'postgres://x@127.0.0.1:1/a', b: 'postgres://x@127.0.0.1:2/b' };
  await assert.rejects(
    planAdoption({ from: url, root: 'users', servers, logicalShards: 8, reference: ['plans'] }),
    (e: unknown) => {
      assert.ok(isShardflakeError(e, 'ADOPT_REFUSED'));
      assert.match(e.message, /table audit_log has no foreign-key path to users: .*--reference/);
      assert.match(e.message, /table drafts: its foreign key drafts\.user_id → users may be null.*NOT NULL/);
      assert.match(e.message, /table tags has no primary key/);
      assert.doesNotMatch(e.message, /photos|comments|follows/, 'placeable tables are not named');
      assert.ok(!e.message.includes('\n'), 'one line');
      return true;
    },
  );
  await assert.rejects(
    planAdoption({ from: url, root: 'tags', servers }),
    (e: unknown) =>
      isShardflakeError(e, 'ADOPT_REFUSED') && /needs a primary key of one integer column/.test(e.message),
  );
  // What it cannot place made placeable: the plan goes through and says what it changed.
  const plan = await planAdoption({
    from: url,
    root: 'users',
    servers,
    logicalShards: 8,
    reference: ['plans', 'audit_log', 'drafts'],
    schema: 'public',
  }).catch((e: Error) => e);
  assert.ok(
    plan instanceof Error && /table tags has no primary key/.test(plan.message),
    'tags is still refused',
  );
  await withClient(url, (c) => c.query('DROP TABLE tags'));
  const ok = await planAdoption({
    from: url,
    root: 'users',
    servers,
    logicalShards: 8,
    reference: ['plans', 'audit_log', 'drafts'],
  });
  const config = validateConfig(ok.config, 'plan');
  assert.deepEqual(config.adopt?.place.comments, { column: 'photo_id', parent: 'photos' });
  assert.ok(ok.notes.some((n) => /users: unique email becomes the unique lookup users_email/.test(n)));
  assert.ok(ok.notes.some((n) => /photos\.id: its serial default becomes next_id\(\)/.test(n)));
  assert.match(
    JSON.stringify(ok.config.tables),
    /photos_user_id_caption_key/,
    'a unique key with the placement column stays',
  );
  assert.deepEqual(
    config.lookups.map((l) => `${l.table}.${l.column}`),
    ['users.email'],
  );
  await withClient(url, (c) =>
    c.query(`CREATE TABLE tags (name text, photo_id bigint NOT NULL REFERENCES photos (id))`),
  );
  assert.equal(await sourceSnapshot(url), before, 'the plan wrote nothing on the source');

  // The boundary: ids too close to the cluster's first ids are refused, naming an epoch that keeps them apart.
  await withClient(url, async (c) => {
    await c.query("SELECT setval('users_id_seq', 4000000000000000000)");
    const model = buildModel(config, await readSourceSchema(c, 'public'));
    await assert.rejects(
      oldIdsBoundary(config, model, c),
      (e: unknown) =>
        isShardflakeError(e, 'ADOPT_REFUSED') &&
        /set "epoch" to \d{4}-\d{2}-\d{2} or earlier/.test(e.message),
    );
    await c.query("SELECT setval('users_id_seq', 300)");
    assert.ok((await oldIdsBoundary(config, model, c)) > 1_000_000n);
  });
});
