import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { connect } from 'shardflake';
import { packagedBinaries } from '../packages/embedded/src/server-process.js';
import { controlCrcOffset, templateFolder } from '../packages/embedded/src/template.js';
import { useServers } from './support/postgres.js';
import { caughtUp, startReplica } from './support/replicas.js';

// The suite's servers are copies of one initdb template (useServers sets `initdbTemplate`).
const [a, b] = await useServers(2);
const replica = await startReplica(a as NonNullable<typeof a>);

async function systemIdentifier(url: string): Promise<string> {
  const client = await connect(url);
  try {
    const { rows } = await client.query('SELECT system_identifier::text AS id FROM pg_control_system()');
    return rows[0].id as string;
  } finally {
    await client.end();
  }
}

test('two copies of the template are two PostgreSQL systems, each positive; a replica of one shares its identifier', async () => {
  const [idA, idB, idReplica] = await Promise.all([
    systemIdentifier(a?.url as string),
    systemIdentifier(b?.url as string),
    systemIdentifier(replica.url),
  ]);
  assert.notEqual(idA, idB);
  assert.ok(BigInt(idA) > 0n && BigInt(idB) > 0n, `${idA}, ${idB}`);
  assert.equal(idReplica, idA);
  // The replica streams: a row written on the copy reaches it.
  const client = await connect(a?.url as string);
  try {
    await client.query('CREATE TABLE copied (n int); INSERT INTO copied VALUES (7)');
  } finally {
    await client.end();
  }
  await caughtUp(a as NonNullable<typeof a>, replica);
  const standby = await connect(replica.url);
  try {
    assert.deepEqual((await standby.query('SELECT n FROM copied')).rows, [{ n: 7 }]);
  } finally {
    await standby.end();
  }
});

test("each copy answers to its own password only: the template's, or the other copy's, is refused", async () => {
  const withPassword = (url: string, password: string) => {
    const changed = new URL(url);
    changed.password = password;
    return changed.toString();
  };
  // Every template of this user (one per PostgreSQL build; as root the binaries may be a copy placed elsewhere).
  const templates = dirname(await templateFolder(packagedBinaries()));
  const templatePasswords = await Promise.all(
    (await readdir(templates))
      .filter((name) => !name.includes('.making-'))
      .map(async (name) => (await readFile(join(templates, name, 'password'), 'utf8')).trim()),
  );
  assert.ok(templatePasswords.length > 0, `a template in ${templates}`);
  const refused = (e: unknown) =>
    /28P01|password authentication failed/.test(`${(e as { sqlState?: string }).sqlState} ${e}`);
  for (const password of [...templatePasswords, new URL(b?.url as string).password])
    await assert.rejects(connect(withPassword(a?.url as string, password)), refused);
  const own = await connect(a?.url as string);
  await own.end();
});

test("pg_control's CRC-32C is found by its own check, and not in a pg_control whose identifier was changed without it", async () => {
  // The copy started, so PostgreSQL accepted the CRC written for its new identifier.
  const control = await readFile(join(a?.dataDir as string, 'global', 'pg_control'));
  const at = controlCrcOffset(control);
  assert.ok(at > 8 && at < 1024, `offset ${at}`);
  const damaged = Buffer.from(control);
  damaged[0] = (damaged[0] as number) ^ 0xff;
  assert.throws(() => controlCrcOffset(damaged), /no CRC-32C/);
});
