import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { AuthFailedError, createRouter, initCluster, isShardflakeError, validateConfig } from 'shardflake';
import { startCli } from '../support/cli.js';
import { sqlRows, useServers } from '../support/postgres.js';

/**
 * Issue 32, item 6: a wrong password showed as SERVER_UNREACHABLE with no reason, and a missing one as pg's SASL
 * text. A refused login is AUTH_FAILED: one line naming the server, the role, the reason and where the password
 * belongs, without the password and without SCRAM wording; in the library the error keeps server, role, reason and
 * hint as fields; `cluster status` says why a server did not answer.
 */
const servers = await useServers(2);
const [a, b] = servers as [(typeof servers)[0], (typeof servers)[0]];
const dir = await mkdtemp(join(tmpdir(), 'shardflake-auth-'));
after(() => rm(dir, { recursive: true, force: true }));
const password = (url: string) => decodeURIComponent(new URL(url).password);
const withPassword = (url: string, given: string | null) => {
  const u = new URL(url);
  u.password = given ?? '';
  return u.toString();
};
const raw = (bUrl: string) => ({
  servers: { a: a.url, b: bUrl },
  catalog: 'a',
  logicalShards: 4,
  tables: { items: 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text)' },
});
const env = { PGPASSWORD: '', PGPASSFILE: join(dir, 'no-passfile') };
delete process.env.PGPASSWORD;
process.env.PGPASSFILE = env.PGPASSFILE;

async function cli(args: string[], bUrl: string) {
  const file = join(dir, `c-${Math.random().toString(36).slice(2)}.json`);
  await writeFile(file, JSON.stringify(raw(bUrl)));
  return startCli([...args, '--config', file], env).done;
}

const secrets = () => servers.map((s) => password(s.url));

test('cluster init with a wrong or a missing password: exit 3, one AUTH_FAILED line, nothing created', async () => {
  for (const [given, reason] of [
    ['not-the-password', 'password authentication failed'],
    [null, 'no password given'],
  ] as const) {
    const r = await cli(['cluster', 'init'], withPassword(b.url, given));
    assert.equal(r.code, 3, r.stderr);
    assert.equal(r.stderr.split('\n').length, 2, r.stderr);
    assert.match(
      r.stderr,
      new RegExp(
        `^shardflake: error \\[AUTH_FAILED\\]: server b: PostgreSQL at postgres://postgres(:\\*\\*\\*\\*)?@127\\.0\\.0\\.1:${b.port}/postgres refused the login of role postgres \\(${reason}\\); give the role's password in the config's URL as \\$\\{VAR\\} \\(an environment variable\\), in PGPASSWORD or in the pgpass file \\(docs/security\\.md\\)\\n$`,
      ),
    );
    assert.ok(!/SASL|SCRAM-SERVER|client password/.test(r.stderr), r.stderr);
    for (const s of [...secrets(), 'not-the-password']) assert.ok(!r.stderr.includes(s));
  }
  assert.deepEqual(await sqlRows(a.url, "SELECT 1 FROM pg_namespace WHERE nspname = 'shardflake'"), []);
});

test('status says why a server did not answer; a router names the server, role and hint, as fields too', async () => {
  await initCluster(validateConfig(raw(b.url), 'good'));
  const status = await cli(['cluster', 'status', '--json'], withPassword(b.url, 'wrong'));
  assert.equal(status.code, 0, status.stderr);
  const warnings = JSON.parse(status.stdout).warnings as string[];
  assert.ok(
    warnings.some((w) =>
      /^server b did not answer: .* refused the login of role postgres \(password authentication failed\)/.test(
        w,
      ),
    ),
    warnings.join('\n'),
  );
  for (const s of [...secrets(), 'wrong']) assert.ok(!status.stdout.includes(`:${s}@`));

  const router = await createRouter(validateConfig(raw(withPassword(b.url, 'wrong')), 'app'), {
    checkPrivileges: false,
  });
  try {
    const onB = [0, 1, 2, 3].find((shard) => router.placement(shard).server === 'b') as number;
    await assert.rejects(router.insert('items', { note: 'x' }, { shard: onB }), (e: unknown) => {
      assert.ok(isShardflakeError(e, 'AUTH_FAILED') && e instanceof AuthFailedError, String(e));
      assert.deepEqual([e.server, e.role, e.reason], ['b', 'postgres', 'password authentication failed']);
      assert.match(e.hint, /\$\{VAR\}.*PGPASSWORD.*pgpass/);
      assert.match(
        e.message,
        /^server b \(postgres:\/\/postgres:\*\*\*\*@127\.0\.0\.1:\d+\/postgres\) refused the login of role postgres/,
      );
      assert.ok(!e.message.includes('wrong'));
      return true;
    });
  } finally {
    await router.close();
  }
});
