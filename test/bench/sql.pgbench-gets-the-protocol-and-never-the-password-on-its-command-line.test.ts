import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { findPgbench, pgbenchInsertRates } from '../../packages/cli/src/bench/pgbench.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';

/*
 * What bench sql hands pgbench, seen by a stand-in binary that writes down its arguments and environment (the real
 * pgbench runs against a real server in sql.both-languages-both-protocols-and-report.test.ts). A command line is
 * readable by every local user (ps, /proc/PID/cmdline), so the password must reach pgbench another way.
 */
test('pgbench gets -M simple or -M prepared, one script per table, the server without its password, and the password in PGPASSWORD', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-pgbench-'));
  try {
    const seen = join(dir, 'seen');
    const binary = join(dir, 'pgbench');
    await writeFile(
      binary,
      `#!/bin/sh
if [ "$1" = --version ]; then echo 'pgbench (PostgreSQL) 99.1'; exit 0; fi
if [ -n "$FAIL" ]; then echo "connection to server at postgres://alice:$PGPASSWORD@127.0.0.1 failed" >&2; exit 1; fi
{ printf '%s\\n' "$@"; echo "PGPASSWORD=$PGPASSWORD"; echo "PGOPTIONS=$PGOPTIONS"; for f in "$@"; do [ -f "\${f%@1}" ] && cat "\${f%@1}"; done; } > ${seen}
printf 'latency average = 0.300 ms\ntps = 6666.6 (without initial connection time)\n'
printf 'SQL script 1: a\n - weight: 1\n - latency average = 0.200 ms\nSQL script 2: b\n - weight: 1\n - latency average = 0.400 ms\n'
`,
    );
    await chmod(binary, 0o755);
    const pgbench = await findPgbench(binary);
    assert.deepEqual(pgbench, { binary, version: 'pgbench (PostgreSQL) 99.1' });
    const url = 'postgres://alice:s3cr%40t@127.0.0.1:5999/app?sslmode=disable';
    for (const protocol of ['simple', 'prepared'] as const) {
      const rates = await pgbenchInsertRates(
        pgbench as NonNullable<typeof pgbench>,
        url,
        ['"s"."t"', '"s"."u"'],
        {
          clients: 2,
          seconds: 1,
          protocol,
        },
      );

      const lines = (await readFile(seen, 'utf8')).split('\n');
      const args = lines.slice(
        0,
        lines.findIndex((l) => l.startsWith('PGPASSWORD=')),
      );
      // Both tables in one run, one script each, taken at random with equal weights; a rate is clients / mean latency.
      assert.deepEqual(rates, [10_000, 5_000]);
      assert.deepEqual(
        args.filter((_, i) => args[i - 1] === '-f').map((a) => a.endsWith('@1')),
        [true, true],
      );
      assert.equal(args[args.indexOf('-M') + 1], protocol);
      assert.equal(args[args.indexOf('-c') + 1], '2');
      assert.equal(args[args.indexOf('-T') + 1], '1');
      assert.equal(args.at(-1), 'postgres://alice@127.0.0.1:5999/app?sslmode=disable');
      assert.ok(!args.some((a) => a.includes('s3cr')), `password on the command line: ${args.join(' ')}`);
      assert.ok(lines.includes('PGPASSWORD=s3cr@t'));
      assert.ok(lines.includes('PGOPTIONS=-c synchronous_commit=off'));
      assert.ok(lines.includes('INSERT INTO "s"."t" (v) VALUES (1);'), 'a script inserts one row');
      assert.ok(lines.includes('INSERT INTO "s"."u" (v) VALUES (1);'), 'a script per table');
    }

    process.env.FAIL = '1';
    try {
      await assert.rejects(
        pgbenchInsertRates(pgbench as NonNullable<typeof pgbench>, url, ['"s"."t"', '"s"."u"'], {
          clients: 1,
          seconds: 1,
          protocol: 'simple',
        }),
        (e) =>
          isShardflakeError(e, 'DATABASE_ERROR') &&
          /^pgbench failed: /.test(e.message) &&
          !e.message.includes('s3cr'),
      );
    } finally {
      delete process.env.FAIL;
    }
    await assert.rejects(findPgbench(join(dir, 'missing')), (e) => isShardflakeError(e, 'INVALID_ARGUMENT'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
