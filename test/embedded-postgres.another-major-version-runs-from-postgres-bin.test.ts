import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { it } from 'node:test';
import { startEmbeddedServers } from '../packages/embedded/src/embedded.js';
import { isShardflakeError } from '../packages/shardflake/src/errors/errors.js';
import { connect } from '../packages/shardflake/src/postgres/connect.js';

// SHARDFLAKE_POSTGRES_BIN points embedded servers at another PostgreSQL's binaries (compatibility runs:
// `npm run test:pg15`). Proven on the first Debian install found; a machine with none skips.
const DEBIAN = '/usr/lib/postgresql';
const installed = existsSync(DEBIAN)
  ? readdirSync(DEBIAN).filter((v) => existsSync(join(DEBIAN, v, 'bin', 'postgres')))
  : [];

it('an embedded server runs the major version SHARDFLAKE_POSTGRES_BIN names, and the packaged one without it', {
  skip: installed.length === 0 && `no PostgreSQL under ${DEBIAN}`,
}, async () => {
  const version = installed[0] as string;
  const major = async () => {
    const [server] = await startEmbeddedServers(1);
    try {
      const client = await connect(server?.url as string);
      const { rows } = await client.query<{ v: string }>("SELECT current_setting('server_version_num') AS v");
      await client.end();
      return Math.floor(Number(rows[0]?.v) / 10000);
    } finally {
      await server?.stop();
    }
  };
  // Runs with the variable set to `bin` (or unset), then puts it back: a compatibility run sets it for the suite.
  const withBin = async (bin: string | undefined) => {
    const before = process.env.SHARDFLAKE_POSTGRES_BIN;
    if (bin === undefined) delete process.env.SHARDFLAKE_POSTGRES_BIN;
    else process.env.SHARDFLAKE_POSTGRES_BIN = bin;
    try {
      return await major();
    } finally {
      if (before === undefined) delete process.env.SHARDFLAKE_POSTGRES_BIN;
      else process.env.SHARDFLAKE_POSTGRES_BIN = before;
    }
  };
  assert.equal(await withBin(join(DEBIAN, version, 'bin')), Number(version));
  assert.notEqual(await withBin(undefined), Number(version), 'without the variable, the packaged build runs');
});

it('a SHARDFLAKE_POSTGRES_BIN without postgres and initdb is refused in one line before anything starts', async () => {
  const before = process.env.SHARDFLAKE_POSTGRES_BIN;
  process.env.SHARDFLAKE_POSTGRES_BIN = '/nonexistent/bin';
  try {
    await assert.rejects(
      startEmbeddedServers(1),
      (e: unknown) =>
        isShardflakeError(e, 'INVALID_ARGUMENT') &&
        /SHARDFLAKE_POSTGRES_BIN=\/nonexistent\/bin holds no postgres and initdb/.test(e.message) &&
        !e.message.includes('\n'),
    );
  } finally {
    if (before === undefined) delete process.env.SHARDFLAKE_POSTGRES_BIN;
    else process.env.SHARDFLAKE_POSTGRES_BIN = before;
  }
});
