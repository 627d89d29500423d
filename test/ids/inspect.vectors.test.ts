import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect, inspectionToJson, isShardflakeError } from 'shardflake';

test('RFC 9562 UUIDv7 example 017F22E2-79B0-7CC3-98C4-DC0C0C07398F: 2022-02-22T19:22:22Z', () => {
  const result = inspect('017F22E2-79B0-7CC3-98C4-DC0C0C07398F');
  assert.equal(result.format, 'uuid');
  assert.equal(result.fields.version, 7);
  assert.equal(result.timestamp?.getTime(), 0x017f22e279b0);
  assert.equal(result.timestamp?.toISOString(), '2022-02-22T19:22:22.000Z');
});

test('RFC 9562 UUIDv1 and v6 examples carry the same instant', () => {
  const v1 = inspect('C232AB00-9414-11EC-B3C8-9F6BDECED846');
  const v6 = inspect('1EC9414C-232A-6B00-B3C8-9F6BDECED846');
  assert.deepEqual([v1.fields.version, v6.fields.version], [1, 6]);
  assert.equal(v1.timestamp?.toISOString(), '2022-02-22T19:22:22.000Z');
  assert.equal(v6.timestamp?.toISOString(), '2022-02-22T19:22:22.000Z');
  assert.equal(v1.fields.node, '9f6bdeced846');
});

test('UUID v4 has no timestamp; 32 hex digits without hyphens are read as a uuid', () => {
  const result = inspect('109156bec4fb41eab1b4efe1671c5836');
  assert.equal(result.format, 'uuid');
  assert.equal(result.fields.version, 4);
  assert.equal(result.timestamp, null);
  assert.equal(inspectionToJson(result).timestamp, null);
});

test('ULID spec examples: 01ARYZ6S41… is ulid(1469918176385); 01ARZ3NDEKTSV4RRFFQ69G5FAV is 1469922850259', () => {
  const timed = inspect('01ARYZ6S41TSV4RRFFQ69G5FAV');
  assert.equal(timed.format, 'ulid');
  assert.equal(timed.timestamp?.getTime(), 1469918176385);
  const example = inspect('01arz3ndektsv4rrffq69g5fav'); // case-insensitive
  assert.equal(example.timestamp?.getTime(), 1469922850259);
  assert.equal(example.fields.randomness, 'TSV4RRFFQ69G5FAV');
});

test('MongoDB ObjectId: seconds, process random value, counter', () => {
  const result = inspect('507f1f77bcf86cd799439011');
  assert.equal(result.format, 'objectid');
  assert.equal(result.timestamp?.toISOString(), '2012-10-17T21:13:27.000Z');
  assert.deepEqual(result.fields, { random: 'bcf86cd799', counter: 0x439011 });
});

test('64-bit ids with a chosen layout; LSIDs in text and uuid form', () => {
  const discord = inspect('175928847299117063', { layout: 'discord' });
  assert.equal(discord.format, 'int64');
  assert.equal(discord.timestamp?.toISOString(), '2016-04-30T11:18:25.796Z');
  assert.deepEqual([discord.fields.worker, discord.fields.process, discord.fields.increment], [1, 0, 7]);
  const instagram = inspect('2217813737473025833');
  assert.deepEqual([instagram.fields.shard, instagram.fields.sequence], [1001, 809]);
  const json = inspectionToJson(instagram);
  assert.equal(json.format, 'int64');
  assert.equal(json.shard, 1001);
  assert.equal(typeof json.tick, 'string'); // bigints as strings
  const text = inspect('00JTX-05RA0XA6-0CGM-6H');
  assert.deepEqual(
    [text.format, text.fields.day, text.fields.worker, text.fields.sequence],
    ['lsid', 19293, 12820, 209],
  );
  const asUuid = inspect('0012d740-47b9-8989-b403-2141d4000000');
  assert.deepEqual([asUuid.format, asUuid.fields.version, asUuid.fields.sequence], ['uuid', 8, 117]);
});

test('invalid ids of every kind are INVALID_ID', () => {
  for (const bad of [
    '',
    'hello',
    '18446744073709551616', // 2^64
    '017F22E2-79B0-7CC3-98C4-DC0C0C07398G', // not hex
    '017F22E2_79B0_7CC3_98C4_DC0C0C07398F',
    '8ZZZZZZZZZZZZZZZZZZZZZZZZZ', // ULID past its 48-bit time
    '01ARZ3NDEKTSV4RRFFQ69G5FAU', // U
    '00utx-04fecrkm-0cgm-3n',
    '00jtx-04fecrkm-0cgm',
    '507f1f77bcf86cd79943901', // 23 hex digits
  ]) {
    assert.throws(
      () => inspect(bad),
      (e) => isShardflakeError(e) && e.code === 'INVALID_ID',
      bad,
    );
  }
});
