import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { decodeId, lsid, parseId } from 'shardflake';

/** Runs the built CLI as a user would. */
function cli(...args: string[]) {
  const result = spawnSync(process.execPath, ['packages/cli/dist/cli/main.js', ...args], {
    encoding: 'utf8',
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

function assertOneLineError(result: ReturnType<typeof cli>, code: string) {
  assert.notEqual(result.code, 0);
  assert.equal(result.stdout, '');
  assert.match(result.stderr, new RegExp(`^shardflake: error \\[${code}\\]: .+\\n$`));
}

test('id new: one strictly increasing id per line, in the chosen layout and shard', () => {
  const result = cli('id', 'new', '--layout', 'instagram', '--shard', '42', '--count', '2000');
  assert.equal(result.code, 0, result.stderr);
  const ids = result.stdout.trim().split('\n').map(BigInt);
  assert.equal(ids.length, 2000);
  for (let i = 1; i < ids.length; i++) assert.ok((ids[i] as bigint) > (ids[i - 1] as bigint));
  assert.ok(ids.every((id) => decodeId(id, 'instagram').fields.shard === 42));
  const discord = cli('id', 'new', '--layout', 'discord', '--worker', '3', '--process', '4');
  assert.deepEqual(decodeId(discord.stdout.trim(), 'discord').fields.worker, 3);
});

test('id new --format: lsid, ulid, uuidv7, uuidv4, objectid; --encoding base62', () => {
  const shapes: Record<string, RegExp> = {
    lsid: /^[0-9a-z]{5}-[0-9a-z]{8}-[0-9a-z]{4}-[0-9a-z]{2}$/,
    ulid: /^[0-9A-Z]{26}$/,
    uuidv7: /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    uuidv4: /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    objectid: /^[0-9a-f]{24}$/,
  };
  for (const [format, shape] of Object.entries(shapes)) {
    const result = cli('id', 'new', '--format', format, '--count', '3');
    assert.equal(result.code, 0, result.stderr);
    const lines = result.stdout.trim().split('\n');
    assert.equal(lines.length, 3);
    for (const line of lines) assert.match(line, shape, format);
  }
  const worker = cli('id', 'new', '--format', 'lsid', '--worker', '12820');
  assert.equal(lsid.parse(worker.stdout.trim()).worker, 12820);
  const base62 = cli('id', 'new', '--encoding', 'base62');
  assert.match(base62.stdout, /^[0-9A-Za-z]{11}\n$/);
});

test('id inspect: text and --json (one object per line, ISO timestamps, fields)', () => {
  const json = cli(
    'id',
    'inspect',
    '175928847299117063',
    '00jtx-04fecrkm-0cgm-3n',
    '--layout',
    'discord',
    '--json',
  );
  assert.equal(json.code, 0, json.stderr);
  const [discord, paper] = json.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
  assert.equal(discord.format, 'int64');
  assert.equal(discord.timestamp, '2016-04-30T11:18:25.796Z');
  assert.deepEqual([discord.worker, discord.process, discord.increment], [1, 0, 7]);
  assert.equal(paper.format, 'lsid');
  assert.deepEqual([paper.day, paper.worker, paper.sequence], [19293, 12820, 117]);
  const text = cli('id', 'inspect', '017F22E2-79B0-7CC3-98C4-DC0C0C07398F');
  assert.equal(text.code, 0);
  assert.match(text.stdout, /uuid {2}2022-02-22T19:22:22\.000Z/);
});

test('id inspect: base62 and base32 ids from id new decode like the decimal; --encoding and --format override', () => {
  const args = ['--layout', 'discord', '--worker', '3', '--process', '4'];
  const base62 = cli('id', 'new', ...args, '--encoding', 'base62').stdout.trim();
  const base32 = cli('id', 'new', ...args, '--encoding', 'base32').stdout.trim();
  const decimal = parseId(base32, 'base32').toString();
  const json = cli('id', 'inspect', decimal, base32, base62, '--layout', 'discord', '--json');
  assert.equal(json.code, 0, json.stderr);
  const [fromDecimal, fromBase32, fromBase62] = json.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
  assert.deepEqual(
    [fromDecimal.encoding, fromBase32.encoding, fromBase62.encoding],
    ['decimal', 'base32', 'base62'],
  );
  assert.deepEqual([fromBase32.worker, fromBase32.process], [3, 4]);
  assert.deepEqual([fromBase62.worker, fromBase62.process], [3, 4]);
  const sameParts = ({ format, timestamp, fields }: Record<string, unknown>) => ({
    format,
    timestamp,
    fields,
  });
  assert.deepEqual(sameParts(fromBase32), sameParts(fromDecimal));
  assert.equal(fromBase62.id, parseId(base62, 'base62').toString());
  const text = cli('id', 'inspect', '2dpbqYax89p');
  assert.match(text.stdout, /^2dpbqYax89p {2}int64 {2}2020-01-09T21:07:01\.721Z\n/);
  assert.match(text.stdout, /64-bit id 2217813737473025833 \(written in base62\)/);
  const digits = cli('id', 'inspect', '00000000123', '--encoding', 'base62', '--json');
  assert.equal(JSON.parse(digits.stdout).id, String(62 * 62 + 2 * 62 + 3));
  const lsidText = cli('id', 'inspect', '1012000000000000000', '--format', 'lsid', '--json');
  assert.equal(JSON.parse(lsidText.stdout).format, 'lsid');
});

test('bad input: one stderr line and a non-zero exit', () => {
  assertOneLineError(cli('id', 'inspect', 'not-an-id'), 'INVALID_ID');
  assertOneLineError(cli('id', 'inspect', '2217813737473025833', '00utx-04fecrkm-0cgm-3n'), 'INVALID_ID');
  assertOneLineError(cli('id', 'inspect', 'zzzzzzzzzzz'), 'INVALID_ID'); // base62 above 2^64 − 1
  assertOneLineError(cli('id', 'inspect', '1XHT1V000Z9SU'), 'INVALID_ID'); // U is not base32
  assertOneLineError(cli('id', 'inspect', 'AzL8n0Y58m8', '--layout', 'snowflake'), 'INVALID_ID'); // 2^63: 64 bits
  assertOneLineError(cli('id', 'inspect', '2dpbqYax89p', '--format', 'nope'), 'INVALID_ARGUMENT');
  assertOneLineError(
    cli('id', 'inspect', '2dpbqYax89p', '--format', 'uuid', '--encoding', 'base62'),
    'INVALID_ARGUMENT',
  );
  assertOneLineError(cli('id', 'new', '--count', '-1'), 'INVALID_ARGUMENT');
  assertOneLineError(cli('id', 'new', '--count', 'many'), 'INVALID_ARGUMENT');
  assertOneLineError(cli('id', 'new', '--count', '0'), 'INVALID_ARGUMENT');
  assertOneLineError(cli('id', 'new', '--shard', '8192'), 'OUT_OF_RANGE');
  assertOneLineError(cli('id', 'new', '--layout', 'snowflake', '--worker', '1024'), 'OUT_OF_RANGE');
  assertOneLineError(cli('id', 'new', '--format', 'lsid', '--worker', '1048576'), 'OUT_OF_RANGE');
  assertOneLineError(cli('id', 'new', '--layout', 'snowflake', '--shard', '1'), 'INVALID_ARGUMENT');
  assertOneLineError(cli('id', 'new', '--layout', 'nope'), 'INVALID_LAYOUT');
  assertOneLineError(cli('id', 'new', '--format', 'uuidv9'), 'INVALID_ARGUMENT');
});

test('id layouts --json: every preset with its limits', () => {
  const result = cli('id', 'layouts', '--json');
  assert.equal(result.code, 0);
  const rows = result.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
  const instagram = rows.find((r) => r.name === 'instagram');
  assert.equal(instagram.idsPerSecondPerGenerator, 1_024_000);
  assert.equal(instagram.signedOverflowAt.slice(0, 10), '2046-06-27');
  assert.deepEqual(
    rows.map((r) => r.name),
    ['instagram', 'snowflake', 'discord', 'sonyflake'],
  );
});
