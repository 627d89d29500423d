import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { testConfig } from '../cluster/cluster-config.js';
import { sqlRows, useServers } from '../support/postgres.js';

/**
 * Issue 32, item 4: `withReference` accepted `now()`, and the copies silently differed until `cluster verify` ran.
 * A statement that computes a value on the server (volatile functions, the transaction's clock and ids, a column
 * default that calls one) is refused before it runs anywhere, with REFERENCE_NOT_DETERMINISTIC naming the function;
 * the same value passed as a parameter is written alike everywhere. Serial ids stay allowed (every copy's sequence
 * advances together). Without libpg-query the write is refused with MISSING_PACKAGE, never left unchecked.
 */
const servers = await useServers(2);
const referenceTables = {
  plans: 'CREATE TABLE plans (id int PRIMARY KEY, name text NOT NULL, at timestamptz, token text)',
  events:
    'CREATE TABLE events (id serial PRIMARY KEY, what text NOT NULL, at timestamptz NOT NULL DEFAULT now())',
};
const config = testConfig(servers, { logicalShards: 2, referenceTables });
let router: Router;

before(async () => {
  await initCluster(config);
  // A volatile function of the application's own, on both servers (PostgreSQL marks it, not a list of names).
  for (const s of servers)
    await sqlRows(
      s.url,
      `CREATE FUNCTION public.roll() RETURNS int LANGUAGE sql VOLATILE AS 'SELECT (random() * 6)::int'`,
    );
  router = await createRouter(config, { poolSize: 2 });
});
after(() => router?.close());

const copies = async (table: string) =>
  Promise.all(servers.map((s) => sqlRows(s.url, `SELECT * FROM shardflake_reference.${table} ORDER BY id`)));

const refused: [string, string, unknown[]?][] = [
  ['now()', "INSERT INTO plans (id, name, at) VALUES (1, 'free', now())"],
  ['random()', "INSERT INTO plans (id, name, token) VALUES (1, 'free', random()::text)"],
  ['nextval()', "INSERT INTO plans (id, name) VALUES (nextval('events_id_seq'), 'free')"],
  ['clock_timestamp()', "UPDATE plans SET at = pg_catalog.clock_timestamp() WHERE name = 'x'"],
  [
    'gen_random_uuid()',
    "INSERT INTO plans (id, name, token) VALUES ($1, 'free', gen_random_uuid()::text)",
    [1],
  ],
  ['txid_current()', "INSERT INTO plans (id, name, token) VALUES (1, 'free', txid_current()::text)"],
  [
    'pg_current_xact_id()',
    "INSERT INTO plans (id, name, token) VALUES (1, 'free', pg_current_xact_id()::text)",
  ],
  ['CURRENT_TIMESTAMP', "INSERT INTO plans (id, name, at) VALUES (1, 'free', CURRENT_TIMESTAMP)"],
  ['roll()', "INSERT INTO plans (id, name, token) VALUES (public.roll(), 'free', 'x')"],
  ['now()', "INSERT INTO events (what) VALUES ('signed up')"],
  ['now()', "INSERT INTO events (what, at) VALUES ('signed up', DEFAULT)"],
  ['now()', "UPDATE events SET at = DEFAULT WHERE what = 'x'"],
  ['now()', 'INSERT INTO events DEFAULT VALUES'],
];

test('statements that compute a value on each server are refused naming the function, and nothing is written anywhere', async () => {
  for (const [name, text, values] of refused) {
    await assert.rejects(
      router.withReference(async (s) => {
        await s.query(text, values);
      }),
      (e: unknown) => {
        assert.ok(isShardflakeError(e, 'REFERENCE_NOT_DETERMINISTIC'), `${text}: ${String(e)}`);
        assert.match(
          e.message,
          new RegExp(`^withReference refuses ${name.replace(/[()]/g, '\\$&')}: `),
          text,
        );
        return true;
      },
    );
  }
  assert.deepEqual(await copies('plans'), [[], []]);
  assert.deepEqual(await copies('events'), [[], []]);
});

test('the same values passed as parameters, deterministic functions and serial ids are written alike on every copy', async () => {
  const at = new Date('2024-05-01T12:00:00Z');
  await router.withReference(async (s) => {
    await s.query("INSERT INTO plans (id, name, at, token) VALUES (1, lower('FREE'), $1, md5('x'))", [at]);
    await s.query("INSERT INTO events (what, at) VALUES ('a', $1), ('b', $1)", [at]);
    await s.query('SELECT count(*) FROM plans WHERE at < $1', [new Date()]);
  });
  const [onA, onB] = await copies('plans');
  assert.deepEqual(onA, onB);
  assert.deepEqual(
    (onA as { name: string }[]).map((p) => p.name),
    ['free'],
  );
  const events = await copies('events');
  assert.deepEqual(events[0], events[1]);
  assert.deepEqual(
    (events[0] as { id: number }[]).map((e) => e.id),
    [1, 2],
  );
});

test('without libpg-query installed, withReference is MISSING_PACKAGE naming the install, and writes nothing', async () => {
  const temp = await mkdtemp(join(tmpdir(), 'shardflake-no-parser-'));
  try {
    const hooks = join(temp, 'hide.mjs');
    await writeFile(
      hooks,
      `export async function resolve(specifier, context, next) {
  if (specifier === 'libpg-query') throw Object.assign(new Error('not here'), { code: 'ERR_MODULE_NOT_FOUND' });
  return next(specifier, context);
}
`,
    );
    const main = join(temp, 'main.mjs');
    const index = pathToFileURL(resolve('packages/shardflake/dist/index.js')).href;
    await writeFile(
      main,
      `import { register } from 'node:module';
register(${JSON.stringify(pathToFileURL(hooks).href)});
const { createRouter, validateConfig } = await import(${JSON.stringify(index)});
const router = await createRouter(validateConfig(JSON.parse(process.env.CONFIG), 'c'), { poolSize: 1 });
try {
  await router.withReference((s) => s.query("INSERT INTO plans (id, name) VALUES (7, 'x')"));
  console.log('written');
} catch (error) {
  console.log(error.code + ' ' + error.message);
} finally {
  await router.close();
}
`,
    );
    const raw = {
      servers: config.servers,
      catalog: 'a',
      logicalShards: 2,
      epoch: '2024-01-01T00:00:00Z',
      referenceTables,
      tables: {
        photos:
          'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text)',
      },
    };
    const r = spawnSync(process.execPath, [main], {
      encoding: 'utf8',
      env: { ...process.env, CONFIG: JSON.stringify(raw) },
    });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(
      r.stdout.trim(),
      'MISSING_PACKAGE router.withReference (it checks each statement with PostgreSQL’s parser) needs the package libpg-query, which is not installed: npm install libpg-query@18',
    );
    assert.deepEqual(
      await sqlRows(servers[0]?.url as string, 'SELECT id FROM shardflake_reference.plans WHERE id = 7'),
      [],
    );
  } finally {
    await rm(temp, { recursive: true, force: true });
  }
});
