import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { findPgbench, pgbenchInsertRate } from '../../src/bench/pgbench.js';
import { isShardflakeError } from '../../src/errors.js';

/*
 * What bench sql hands pgbench, seen by a stand-in binary that writes down its arguments and environment (the real
 * pgbench runs against a real server in sql.both-languages-both-protocols-and-report.test.ts). A command line is
 * readable by every local user (ps, /proc/PID/cmdline), so the password must reach pgbench another way.
 */
test('pgbench gets -M simple or -M prepared, the server without its password, and the password in PGPASSWORD', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-pgbench-'));
  try {
    const seen = join(dir, 'seen');
    const binary = join(dir, 'pgbench');
    await writeFile(
      binary,
      `#!/bin/sh
if [ "$1" = --version ]; then echo 'pgbench (PostgreSQL) 99.1'; exit 0; fi
if [ -n "$FAIL" ]; then echo "connection to server at postgres://alice:$PGPASSWORD@127.0.0.1 failed" >&2; exit 1; fi
{ printf '%s\\n' "$@"; echo "PGPASSWORD=$PGPASSWORD"; echo "PGOPTIONS=$PGOPTIONS"; for f in "$@"; do [ -f "$f" ] && cat "$f"; done; } > ${seen}
echo 'tps = 1234.5 (without initial connection time)'
`,
    );
    await chmod(binary, 0o755);
    const pgbench = await findPgbench(binary);
    assert.deepEqual(pgbench, { binary, version: 'pgbench (PostgreSQL) 99.1' });
    const url = 'postgres://alice:s3cr%40t@127.0.0.1:5999/app?sslmode=disable';
    for (const protocol of ['simple', 'prepared'] as const) {
      const rate = await pgbenchInsertRate(pgbench as NonNullable<typeof pgbench>, url, '"s"."t"', {
        clients: 2,
        seconds: 1,
        protocol,
      });
      assert.equal(rate, 1234.5);
      const lines = (await readFile(seen, 'utf8')).split('\n');
      const args = lines.slice(
        0,
        lines.findIndex((l) => l.startsWith('PGPASSWORD=')),
      );
      assert.equal(args[args.indexOf('-M') + 1], protocol);
      assert.equal(args[args.indexOf('-c') + 1], '2');
      assert.equal(args[args.indexOf('-T') + 1], '1');
      assert.equal(args.at(-1), 'postgres://alice@127.0.0.1:5999/app?sslmode=disable');
      assert.ok(!args.some((a) => a.includes('s3cr')), `password on the command line: ${args.join(' ')}`);
      assert.ok(lines.includes('PGPASSWORD=s3cr@t'));
      assert.ok(lines.includes('PGOPTIONS=-c synchronous_commit=off'));
      assert.ok(lines.includes('INSERT INTO "s"."t" (v) VALUES (1);'), 'the script inserts one row');
    }

    process.env.FAIL = '1';
    try {
      await assert.rejects(
        pgbenchInsertRate(pgbench as NonNullable<typeof pgbench>, url, '"s"."t"', {
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
