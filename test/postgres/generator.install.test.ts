import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import {
  connect,
  GENERATOR_VERSION,
  generatorSql,
  installGenerator,
  isShardflakeError,
  readInstalledGenerator,
} from 'shardflake';
import { DEFAULT_GENERATOR_LANGUAGE } from '../../packages/shardflake/src/postgres/generator-sql.js';
import { SLOW_PATH_SCHEMA } from '../../packages/shardflake/src/postgres/slow-path-sql.js';
import { useServers } from '../support/postgres.js';
import { shardWithTable } from './generator-fixture.js';

test('installing is idempotent, upgrades in place and refuses to turn a shard into another', async (t) => {
  const [server] = await useServers(1);
  const client = await connect((server as { url: string }).url);
  const languageOfNextId = async () => {
    const { rows } = await client.query(
      `SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
       WHERE p.oid = 'shard_0042.next_id()'::regprocedure`,
    );
    return rows[0].lanname as string;
  };
  try {
    const table = await shardWithTable(client, { schema: 'shard_0042', shard: 42 });
    await client.query(`INSERT INTO ${table} (v) SELECT 1 FROM generate_series(1, 5000)`);
    const before = await client.query(`SELECT max(id) AS m FROM ${table}`);

    await t.test(
      'running the install again (library and CLI SQL, twice each) keeps the table and the counter',
      async () => {
        await installGenerator(client, { schema: 'shard_0042', shard: 42 });
        const cliSql = execFileSync(
          process.execPath,
          ['packages/cli/dist/cli/main.js', 'sql', 'generator', '--schema', 'shard_0042', '--shard', '42'],
          {
            encoding: 'utf8',
          },
        );
        await client.query(cliSql);
        await client.query(cliSql);
        await client.query(`INSERT INTO ${table} (v) SELECT 2 FROM generate_series(1, 5000)`);
        const { rows } = await client.query(
          `SELECT count(*)::int AS n, min(id) FILTER (WHERE v = 2) AS first_new FROM ${table}`,
        );
        assert.equal(rows[0].n, 10_000);
        assert.ok(rows[0].first_new > before.rows[0].m);
        const installed = await readInstalledGenerator(client, 'shard_0042');
        assert.equal(installed?.version, GENERATOR_VERSION);
        assert.equal(installed?.shard, 42);
        // The CLI and the library agree on the default way of writing next_id().
        assert.equal(await languageOfNextId(), DEFAULT_GENERATOR_LANGUAGE);
      },
    );

    await t.test(
      're-installing with language sql switches next_id() in place, and back; ids keep increasing',
      async () => {
        const maxId = async () =>
          BigInt((await client.query(`SELECT max(id)::text AS m FROM ${table}`)).rows[0].m);
        let last = await maxId();
        for (const language of ['sql', 'plpgsql'] as const) {
          await installGenerator(client, { schema: 'shard_0042', shard: 42, language });
          assert.equal(await languageOfNextId(), language);
          await client.query(`INSERT INTO ${table} (v) SELECT 4 FROM generate_series(1, 3000)`);
          const { rows: fresh } = await client.query(
            `SELECT count(DISTINCT id)::int AS d, min(id)::text AS lo FROM ${table} WHERE id > $1`,
            [last.toString()],
          );
          assert.equal(fresh[0].d, 3000);
          last = await maxId();
        }
        await client.query(`DELETE FROM ${table} WHERE v = 4`);
      },
    );

    await t.test(
      'a next_id() that shardflake did not install is refused and kept, unless the install is told to take it over',
      async () => {
        await client.query('CREATE SCHEMA hand_written');
        // Comments that are not shardflake's: none, plain text, text that looks like JSON, JSON of something else.
        for (const comment of [null, 'hand-written, see wiki', '{not json', '{"owner": "payments"}']) {
          await client.query(
            'CREATE OR REPLACE FUNCTION hand_written.next_id() RETURNS bigint LANGUAGE sql RETURN 7',
          );
          await client.query(
            `COMMENT ON FUNCTION hand_written.next_id() IS ${comment === null ? 'NULL' : `'${comment}'`}`,
          );
          await assert.rejects(installGenerator(client, { schema: 'hand_written', shard: 3 }), (e) => {
            assert.ok(isShardflakeError(e, 'INVALID_ARGUMENT'), String(e));
            assert.match(
              e.message,
              /hand_written has a next_id\(\) that shardflake did not install.*--replace/,
            );
            return true;
          });
          const kept = await client.query('SELECT hand_written.next_id() AS id');
          assert.equal(kept.rows[0].id, 7n, `comment ${comment}: the function is untouched`);
        }
        await client.query(
          'CREATE TABLE hand_written.t (id bigint PRIMARY KEY DEFAULT hand_written.next_id(), v int)',
        );
        await installGenerator(client, { schema: 'hand_written', shard: 3, replace: true });
        const { rows } = await client.query(
          'INSERT INTO hand_written.t (v) VALUES (1), (2) RETURNING hand_written.id_to_shard(id) AS s',
        );
        assert.deepEqual(
          rows.map((r) => r.s),
          [3, 3],
          "the table's default now gives shardflake ids",
        );
        // An id the old function issued ahead of the clock: after the catch-up the README describes, new ids are above it.
        const ahead = (BigInt(Date.now() - 1314220021721 + 3_600_000) << 23n) | (3n << 10n) | 5n;
        await client.query('INSERT INTO hand_written.t (id, v) VALUES ($1, 3)', [ahead]);
        await client.query('SELECT hand_written.next_id_catch_up((SELECT max(id) FROM hand_written.t))');
        const after = await client.query('INSERT INTO hand_written.t (v) VALUES (4) RETURNING id');
        assert.ok(after.rows[0].id > ahead, `${after.rows[0].id} > ${ahead}`);
        // From then on it is shardflake's: a plain re-install is harmless.
        await installGenerator(client, { schema: 'hand_written', shard: 3 });
      },
    );

    await t.test('installing another shard, layout or epoch over it is refused', async () => {
      for (const options of [
        { schema: 'shard_0042', shard: 43 },
        { schema: 'shard_0042', shard: 42, epoch: Date.UTC(2024, 0, 1) },
      ]) {
        await assert.rejects(installGenerator(client, options), (e) =>
          isShardflakeError(e, 'INVALID_ARGUMENT'),
        );
      }
    });

    await t.test(
      'the default next_id() is one call in the INSERT (nothing to inline per statement); language sql is inlined',
      async () => {
        const plan = async () => {
          const { rows } = await client.query(
            `EXPLAIN (VERBOSE, COSTS OFF) INSERT INTO ${table} (v) VALUES (1)`,
          );
          return rows.map((r) => r['QUERY PLAN']).join('\n');
        };
        await installGenerator(client, { schema: 'shard_0042', shard: 42 });
        assert.match(await plan(), /shard_0042\.next_id\(\)/);
        assert.doesNotMatch(await plan(), /nextval/);
        await installGenerator(client, { schema: 'shard_0042', shard: 42, language: 'sql' });
        assert.match(await plan(), /nextval\('shard_0042\.next_id_counter'::regclass\)/);
        assert.doesNotMatch(await plan(), /shard_0042\.next_id\(\)/);
        await installGenerator(client, { schema: 'shard_0042', shard: 42 });
      },
    );

    await t.test(
      'a role with INSERT and USAGE on the counter can insert (the new-era path runs as the owner) but cannot move the generator',
      async () => {
        const lastValue = async () =>
          BigInt(
            (await client.query(`SELECT pg_sequence_last_value('shard_0042.next_id_counter')::text AS v`))
              .rows[0].v,
          );
        const keepMask = BigInt.asIntN(64, (8191n << 10n) | (1n << 63n));
        await client.query(`CREATE ROLE app_writer`);
        await client.query(`GRANT USAGE ON SCHEMA shard_0042 TO app_writer`);
        await client.query(`GRANT INSERT, SELECT ON ${table} TO app_writer`);
        await client.query(`GRANT USAGE ON SEQUENCE shard_0042.next_id_counter TO app_writer`);
        await client.query('SET ROLE app_writer');
        try {
          // Rows a few ms apart: each starts a new era, i.e. runs the setval that USAGE alone does not allow.
          for (let i = 0; i < 5; i++) {
            await client.query(`INSERT INTO ${table} (v) VALUES (3)`);
            await client.query('SELECT pg_sleep(0.003)');
          }
          await assert.rejects(
            client.query(`SELECT shard_0042.next_id_catch_up(${2n ** 62n})`),
            (e) => (e as { code?: string }).code === '42501',
          );
          await assert.rejects(
            client.query(`SELECT pg_catalog.setval('shard_0042.next_id_counter', 1)`),
            (e) => (e as { code?: string }).code === '42501',
          );
          // The shared slow path runs with its caller's rights: handed this counter and constants that would store
          // an era an hour ahead, it refuses the setval as setval itself does.
          const counterBefore = await lastValue();
          await assert.rejects(
            client.query(
              `SELECT ${SLOW_PATH_SCHEMA}.new_era('shard_0042.next_id_counter', 0, 23, 8388608, $1, $2, $3, 1, 'instagram')`,
              [keepMask.toString(), (42n << 10n).toString(), 1314220021721 - 3_600_000],
            ),
            (e) => (e as { code?: string }).code === '42501',
          );
          assert.ok((await lastValue()) - counterBefore < 1n << 23n, 'the counter did not move to a new era');
          // The per-shard entry point takes no argument: nothing to aim it at another counter or era.
          await assert.rejects(
            client.query(`SELECT shard_0042.next_id_new_era(1)`),
            (e) => (e as { code?: string }).code === '42883',
          );
        } finally {
          await client.query('RESET ROLE');
        }
        const { rows } = await client.query(`SELECT count(*)::int AS n FROM ${table} WHERE v = 3`);
        assert.equal(rows[0].n, 5);
      },
    );

    await t.test(
      "each shard's slow path is one SQL call of one shared PL/pgSQL function, in a schema the installer owns",
      async () => {
        const { rows } = await client.query(
          `SELECT l.lanname, p.prosecdef, p.pronargs,
                  (SELECT count(*)::int FROM pg_proc q JOIN pg_language m ON m.oid = q.prolang
                    WHERE q.pronamespace = 'shard_0042'::regnamespace AND m.lanname = 'plpgsql') AS plpgsql_in_shard
           FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
           WHERE p.oid = 'shard_0042.next_id_new_era()'::regprocedure`,
        );
        // next_id() itself stays PL/pgSQL (the fast path); on PostgreSQL 18 nothing else in the shard is. Before 18
        // an SQL function is planned again in every transaction, so there the two entry points (next_id_new_era,
        // next_id_catch_up) are one-line PL/pgSQL calls of the shared functions.
        const version = Number(
          (await client.query('SELECT current_setting($1) AS v', ['server_version_num'])).rows[0].v,
        );
        assert.deepEqual(
          rows[0],
          version >= 180000
            ? { lanname: 'sql', prosecdef: true, pronargs: 0, plpgsql_in_shard: 1 }
            : { lanname: 'plpgsql', prosecdef: true, pronargs: 0, plpgsql_in_shard: 3 },
        );
        // Installing another shard leaves the shared functions as they are (rewriting them would make every backend
        // compile them again).
        const versions = async () =>
          (
            await client.query(
              `SELECT string_agg(proname || ':' || xmin, ',' ORDER BY proname) AS v FROM pg_proc
               WHERE pronamespace = '${SLOW_PATH_SCHEMA}'::regnamespace`,
            )
          ).rows[0].v as string;
        const shared = await versions();
        await installGenerator(client, { schema: 'shard_0044', shard: 44 });
        assert.equal(await versions(), shared);
        // A shared schema someone else owns could hold their code, which this role's shards would then run: the
        // install uses this role's own (as a superuser running a move does where a plain role ran init), and
        // refuses when that one is someone else's too.
        await client.query(`CREATE ROLE other_owner`);
        await client.query(`ALTER SCHEMA ${SLOW_PATH_SCHEMA} OWNER TO other_owner`);
        const own = (
          await client.query(
            `SELECT '${SLOW_PATH_SCHEMA}_' || oid AS s FROM pg_roles WHERE rolname = current_user`,
          )
        ).rows[0].s as string;
        try {
          const table43 = await shardWithTable(client, { schema: 'shard_0043', shard: 43 });
          const entry = await client.query(
            `SELECT pg_get_functiondef('shard_0043.next_id_new_era()'::regprocedure) AS d`,
          );
          assert.match(entry.rows[0].d, new RegExp(`RETURN ${own}\\.new_era\\(`));
          for (let i = 0; i < 3; i++) {
            await client.query(`INSERT INTO ${table43} (v) VALUES (1)`);
            await client.query('SELECT pg_sleep(0.003)');
          }
          await client.query(`ALTER SCHEMA ${own} OWNER TO other_owner`);
          await assert.rejects(installGenerator(client, { schema: 'shard_0045', shard: 45 }), (e) => {
            if (!isShardflakeError(e)) return false;
            assert.equal(e.sqlState, '42501');
            assert.match(e.message, new RegExp(`schema ${own} belongs to another role`));
            return true;
          });
        } finally {
          await client.query(`ALTER SCHEMA ${SLOW_PATH_SCHEMA} OWNER TO CURRENT_USER`);
          await client.query(`ALTER SCHEMA ${own} OWNER TO CURRENT_USER`);
        }
      },
    );
  } finally {
    await client.end();
  }
});

for (const { version, schema, shard, what } of [
  { version: 1, schema: 'g1', shard: 1, what: 'seqlock guard' },
  { version: 2, schema: 'g2', shard: 2, what: 'era in the low counter bits' },
  { version: 3, schema: 'g3', shard: 3, what: 'slow path of about 30 functions' },
  { version: 4, schema: 'g4', shard: 4, what: 'no next_id_bulk()' },
  { version: 5, schema: 'g5', shard: 5, what: 'a PL/pgSQL slow path in every shard' },
]) {
  test(`a version ${version} generator (${what}) is upgraded in place: new ids above every old one, on the clock`, async () => {
    const [server] = await useServers(1);
    const client = await connect((server as { url: string }).url);
    try {
      // The SQL `shardflake sql generator --schema ${schema} --shard ${shard}` printed in that version.
      await client.query(
        readFileSync(`test/postgres/fixtures/generator-v${version}-shard-${schema}.sql`, 'utf8'),
      );
      await client.query(
        `CREATE TABLE ${schema}.items (id bigint PRIMARY KEY DEFAULT ${schema}.next_id(), v integer)`,
      );
      await client.query(`INSERT INTO ${schema}.items (v) SELECT 1 FROM generate_series(1, 20000)`);
      assert.equal((await readInstalledGenerator(client, schema))?.version, version);

      await installGenerator(client, { schema, shard });
      assert.equal((await readInstalledGenerator(client, schema))?.version, GENERATOR_VERSION);
      await client.query(`INSERT INTO ${schema}.items (v) SELECT 2 FROM generate_series(1, 10000)`);
      // next_id_bulk(), new in version 5, on the same counter.
      await client.query(
        `INSERT INTO ${schema}.items (id, v) SELECT ${schema}.next_id_bulk(), 2 FROM generate_series(1, 10000)`,
      );
      const { rows } = await client.query(
        `SELECT count(DISTINCT id)::int AS n, max(id) FILTER (WHERE v = 1) AS old_max,
                min(id) FILTER (WHERE v = 2) AS new_min, bool_and(${schema}.id_to_shard(id) = ${shard}) AS shard_ok,
                to_regclass('${schema}.next_id_guard') IS NULL AS guard_gone,
                (extract(epoch FROM ${schema}.id_to_timestamp(max(id)) - clock_timestamp()) * 1000)::float8 AS ahead_ms
         FROM ${schema}.items`,
      );
      assert.equal(rows[0].n, 40_000);
      assert.ok(BigInt(rows[0].new_min) > BigInt(rows[0].old_max));
      assert.equal(rows[0].shard_ok, true);
      assert.equal(rows[0].guard_gone, true);
      // The time bits stay on the clock: at most the run-ahead of 40,000 ids (40,000 / 2^10 ms) past it. (Up to
      // version 4 the upgrade of a version 3 counter moved them years ahead.)
      assert.ok(rows[0].ahead_ms <= 40_000 / 1024, `new ids ${rows[0].ahead_ms} ms ahead of the clock`);
      // And installing again changes nothing.
      await installGenerator(client, { schema, shard });
      await client.query(`INSERT INTO ${schema}.items (v) SELECT 3 FROM generate_series(1, 10)`);
      const after = await client.query(`SELECT count(DISTINCT id)::int AS n FROM ${schema}.items`);
      assert.equal(after.rows[0].n, 40_010);
    } finally {
      await client.end();
    }
  });
}

test('bad input is refused before any SQL is made', () => {
  const hostile = [
    'x"; DROP TABLE users; --',
    'a b',
    '',
    '1abc',
    'ünïcode',
    'x'.repeat(64),
    'pg_catalog"."x',
  ];
  for (const schema of hostile) {
    assert.throws(
      () => generatorSql({ schema, shard: 1 }),
      (e) => isShardflakeError(e, 'INVALID_IDENTIFIER'),
    );
  }
  for (const shard of [-1, 8192, 1.5, Number.NaN]) {
    assert.throws(
      () => generatorSql({ schema: 's', shard }),
      (e) => isShardflakeError(e, 'OUT_OF_RANGE'),
    );
  }
  assert.throws(
    () => generatorSql({ schema: 's', shard: 1, layout: 'snowflake' }),
    (e) => isShardflakeError(e, 'INVALID_LAYOUT'),
  );
  assert.throws(
    () => generatorSql({ schema: 's', shard: 1, epoch: -5 }),
    (e) => isShardflakeError(e, 'INVALID_ARGUMENT'),
  );
  // A name that needs no escaping is still always double-quoted (mixed case stays itself).
  assert.match(generatorSql({ schema: 'Shard_7', shard: 7 }), /CREATE SCHEMA IF NOT EXISTS "Shard_7"/);
});

test('the CLI prints the SQL or one error line with a non-zero exit code', () => {
  const run = (...args: string[]) => {
    try {
      return {
        out: execFileSync(process.execPath, ['packages/cli/dist/cli/main.js', ...args], {
          encoding: 'utf8',
          stdio: 'pipe',
        }),
        code: 0,
      };
    } catch (e) {
      const err = e as { status: number; stderr: string };
      return { out: err.stderr, code: err.status };
    }
  };
  const ok = run('sql', 'generator', '--schema', 'insta5', '--shard', '5', '--epoch', '1314220021721');
  assert.equal(ok.code, 0);
  assert.match(ok.out, /^-- shardflake id generator/);
  assert.match(ok.out, /CREATE OR REPLACE FUNCTION "insta5"."next_id"\(\)/);
  assert.doesNotMatch(ok.out, /taking over/);
  const replace = run('sql', 'generator', '--schema', 'insta5', '--shard', '5', '--replace');
  assert.match(replace.out, /RAISE NOTICE 'taking over the next_id\(\) in schema %/);
  assert.doesNotMatch(replace.out, /did not install; to take it over/);
  const bad = run('sql', 'generator', '--schema', 'x;drop', '--shard', '5');
  assert.equal(bad.code, 2);
  assert.match(bad.out, /^shardflake: error \[INVALID_IDENTIFIER\]/);
  assert.equal(bad.out.trim().split('\n').length, 1);
  const range = run('sql', 'generator', '--schema', 'x', '--shard', '8192');
  assert.match(range.out, /\[OUT_OF_RANGE\]/);
});
