// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${VAR} in plain strings is the config syntax under test
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { isShardflakeError } from 'shardflake';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { useServers } from '../support/postgres.js';

/**
 * Passwords need not live in the config file: `${VAR}` in a URL is the environment variable (percent-encoded in
 * the user/password part), a missing one is one INVALID_CONFIG line naming the variable and never a value, and a
 * URL with no password connects with PGPASSWORD or the pgpass file, as libpq does (without node-postgres'
 * deprecation warning for its own pgpass support). Checked
 * against a real server whose password is random.
 */
const [server] = await useServers(1);
const url = new URL(server?.url ?? '');
const password = decodeURIComponent(url.password);
const withoutPassword = `postgres://${url.username}@${url.host}${url.pathname}`;
const temp = await mkdtemp(join(tmpdir(), 'shardflake-pgpass-'));
after(() => rm(temp, { recursive: true, force: true }));

const config = (servers: Record<string, string>) => ({
  servers,
  catalog: 'a',
  logicalShards: 4,
  tables: { users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id())' },
});

async function selectOne(target: string): Promise<number> {
  const client = await connect(target);
  try {
    return (await client.query('SELECT 1 AS one')).rows[0].one as number;
  } finally {
    await client.end();
  }
}

function withEnv<T>(vars: Record<string, string | undefined>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const set = (values: Record<string, string | undefined>) => {
    for (const [k, v] of Object.entries(values)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  set(vars);
  return fn().finally(() => set(saved));
}

describe('secrets outside the config file', () => {
  it('${VAR} in a URL is the variable, and the server accepts the result', async () => {
    const template = `postgres://\${SF_USER}:\${SF_PASSWORD}@\${SF_HOST}${url.pathname}`;
    await withEnv({ SF_USER: url.username, SF_PASSWORD: password, SF_HOST: url.host }, async () => {
      const { servers } = validateConfig(config({ a: template }), 'cluster.json');
      assert.equal(servers.a, server?.url);
      assert.equal(await selectOne(servers.a as string), 1);
    });
  });

  it('a value in the password part is percent-encoded, so @ / : stay one password', async () => {
    await withEnv({ SF_PASSWORD: 'p@ss/w:rd' }, async () => {
      const { servers } = validateConfig(
        config({ a: 'postgres://app:${SF_PASSWORD}@db1:5432/app' }),
        'c.json',
      );
      assert.equal(servers.a, 'postgres://app:p%40ss%2Fw%3Ard@db1:5432/app');
      assert.equal(decodeURIComponent(new URL(servers.a as string).password), 'p@ss/w:rd');
    });
  });

  it('a missing variable is one INVALID_CONFIG line naming it, with no secret in it', async () => {
    await withEnv({ SF_PASSWORD: 'hunter2-secret', SF_MISSING: undefined }, async () => {
      assert.throws(
        () =>
          validateConfig(
            config({ a: 'postgres://app:${SF_PASSWORD}@${SF_MISSING}/app', b: 'postgres://x:secret@h/db' }),
            'cluster.json',
          ),
        (e: unknown) => {
          assert.ok(isShardflakeError(e, 'INVALID_CONFIG'), String(e));
          assert.equal(
            e.message,
            'cluster.json: servers.a names the environment variable SF_MISSING (${SF_MISSING}), which is not set',
          );
          assert.doesNotMatch(e.message, /hunter2|secret@/);
          return true;
        },
      );
    });
  });

  it('a URL without a password connects with PGPASSWORD, as libpq does', async () => {
    await withEnv({ PGPASSWORD: password, PGPASSFILE: join(temp, 'none') }, async () => {
      const { servers } = validateConfig(config({ a: withoutPassword }), 'cluster.json');
      assert.equal(await selectOne(servers.a as string), 1);
    });
    await withEnv({ PGPASSWORD: 'wrong', PGPASSFILE: join(temp, 'none') }, async () => {
      await assert.rejects(selectOne(withoutPassword));
    });
  });

  it('a URL without a password connects with the pgpass file (PGPASSFILE, mode 0600)', async () => {
    const file = join(temp, 'pgpass');
    await writeFile(file, `${url.hostname}:${url.port}:*:${url.username}:${password}\n`, { mode: 0o600 });
    // node-postgres reads the pgpass file too, but prints a DeprecationWarning in the host's process when it does:
    // shardflake looks the password up itself and hands it over as node-postgres' supported password function.
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on('warning', onWarning);
    try {
      await withEnv({ PGPASSWORD: undefined, PGPASSFILE: file }, async () => {
        assert.equal(await selectOne(withoutPassword), 1);
      });
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('warning', onWarning);
    }
    assert.deepEqual(
      warnings.map((w) => w.message),
      [],
    );
  });
});
