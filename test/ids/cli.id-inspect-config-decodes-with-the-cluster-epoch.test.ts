import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { encodeId, layouts, withEpoch } from 'shardflake';

/**
 * Issue 32, item 6: `id inspect` had no way to take a cluster's epoch, so a cluster's ids (epoch 2024) decoded with
 * the preset's (2011) and showed a date in 2014. `--config FILE` decodes with the cluster's layout and epoch (no
 * server is asked: the config is the cluster's, or a router would refuse it), `--epoch` takes ms or an ISO date,
 * and both at once is one line, exit 2.
 */
const dir = await mkdtemp(join(tmpdir(), 'shardflake-inspect-'));
after(() => rm(dir, { recursive: true, force: true }));
const config = join(dir, 'cluster.json');
await writeFile(
  config,
  JSON.stringify({
    servers: { a: 'postgres://app@127.0.0.1:1/app' }, // never connected to
    catalog: 'a',
    logicalShards: 256,
    epoch: '2024-01-01T00:00:00Z',
    tables: { users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id())' },
  }),
);
const made = new Date('2024-06-01T12:00:00.000Z');
const id = encodeId(
  { timestamp: made, fields: { shard: 200, sequence: 3 } },
  withEpoch(layouts.instagram, Date.parse('2024-01-01T00:00:00Z')),
).toString();

const cli = (...args: string[]) =>
  spawnSync(process.execPath, ['packages/cli/dist/cli/main.js', 'id', 'inspect', id, ...args], {
    encoding: 'utf8',
  });

test('--config decodes with the cluster epoch; without it the preset epoch gives another date', () => {
  const withConfig = cli('--config', config, '--json');
  assert.equal(withConfig.status, 0, withConfig.stderr);
  const decoded = JSON.parse(withConfig.stdout);
  assert.equal(decoded.timestamp, made.toISOString());
  assert.equal(decoded.shard, 200);
  assert.equal(decoded.sequence, 3);
  const plain = JSON.parse(cli('--json').stdout);
  // Read with instagram's own epoch (2011-08-24), the same ticks land five months after it.
  const shifted = made.getTime() - Date.parse('2024-01-01T00:00:00Z') + layouts.instagram.epoch;
  assert.equal(plain.timestamp, new Date(shifted).toISOString());
});

test('--epoch takes an ISO date or milliseconds, with the same answer', () => {
  for (const epoch of ['2024-01-01T00:00:00Z', String(Date.parse('2024-01-01T00:00:00Z'))]) {
    const r = cli('--epoch', epoch, '--json');
    assert.equal(r.status, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).timestamp, made.toISOString());
  }
});

test('--config with --epoch or --layout, or a config that is not there, is one line and exit 2', () => {
  for (const extra of [
    ['--epoch', '0'],
    ['--layout', 'snowflake'],
  ]) {
    const r = cli('--config', config, ...extra);
    assert.equal(r.status, 2);
    assert.equal(r.stdout, '');
    assert.match(
      r.stderr,
      /^shardflake: error \[INVALID_ARGUMENT\]: --config gives the cluster's layout and epoch; leave out --(epoch|layout)\n$/,
    );
  }
  const missing = cli('--config', join(dir, 'none.json'));
  assert.equal(missing.status, 2);
  assert.match(
    missing.stderr,
    /^shardflake: error \[INVALID_CONFIG\]: cannot read config file .*none\.json \(ENOENT\)\n$/,
  );
});
