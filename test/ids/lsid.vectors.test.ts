import assert from 'node:assert/strict';
import { test } from 'node:test';
import { findMac, isShardflakeError, lsid, workerIdFromMac } from 'shardflake';
import { parse as parseUuid, version as uuidVersion, validate as validUuid } from 'uuid';

const is = (c: string) => (e: unknown) => isShardflakeError(e) && e.code === c;

test("the paper's two examples: day 19293 (2022-10-28), worker 12820, sequences 117 and 209", () => {
  const first = lsid.parse('00jtx-04fecrkm-0cgm-3n');
  const second = lsid.parse('00JTX-05RA0XA6-0CGM-6H'); // written in upper case in the paper
  for (const d of [first, second]) {
    assert.equal(d.day, 19293);
    assert.equal(d.timestamp.toISOString().slice(0, 10), '2022-10-28');
    assert.equal(d.worker, 12820);
  }
  assert.equal(first.sequence, 117);
  assert.equal(second.sequence, 209);
  assert.equal(first.ticks, 4813382260);
  assert.equal(first.time, '2022-10-28T00:08:01.3382260Z');
  assert.equal(lsid.format(first.value), '00jtx-04fecrkm-0cgm-3n');
  assert.equal(lsid.format(second.value, { upper: true }), '00JTX-05RA0XA6-0CGM-6H');
  assert.equal(lsid.format(first, { hyphens: false }), '00jtx04fecrkm0cgm3n');
  assert.equal(lsid.compare('00jtx-04fecrkm-0cgm-3n', '00JTX-05RA0XA6-0CGM-6H'), -1);
  assert.equal(lsid.encode({ day: 19293, ticks: 4813382260, worker: 12820, sequence: 117 }), first.value);
});

test('binary form: 12 bytes, top bit 0; uuid form: a valid version-8 uuid that round-trips', () => {
  const bytes = lsid.toBytes('00jtx-04fecrkm-0cgm-3n');
  assert.equal(bytes.length, 12);
  assert.equal(Buffer.from(bytes).toString('hex'), '0012d74047b9989d00c85075');
  assert.equal(lsid.fromBytes(bytes).sequence, 117);
  const uuid = lsid.toUuid('00jtx-04fecrkm-0cgm-3n');
  assert.equal(uuid, '0012d740-47b9-8989-b403-2141d4000000');
  assert.ok(validUuid(uuid));
  assert.equal(uuidVersion(uuid), 8);
  assert.equal((parseUuid(uuid)[8] as number) >> 6, 0b10); // RFC 9562 variant
  assert.equal(lsid.format(lsid.fromUuid(uuid.toUpperCase()).value), '00jtx-04fecrkm-0cgm-3n');
  assert.throws(() => lsid.fromUuid('017f22e2-79b0-7cc3-98c4-dc0c0c07398f'), is('INVALID_ID')); // a v7, not an LSID
  assert.throws(() => lsid.fromBytes(new Uint8Array(11)), is('INVALID_ID'));
  assert.throws(
    () => lsid.fromBytes(Uint8Array.from({ length: 12 }, (_, i) => (i === 0 ? 0x80 : 0))),
    is('INVALID_ID'),
  );
});

test('worker id: BLAKE2s-256 of the 6 MAC bytes, first 20 bits; the MAC chosen from os.networkInterfaces()', () => {
  // BLAKE2s-256(00 00 5e 00 53 01) = dd5b4f8b… (Python's hashlib.blake2s agrees): bits dd 5b 4 → 0xdd5b4.
  assert.equal(workerIdFromMac('00:00:5e:00:53:01'), 0xdd5b4);
  assert.equal(workerIdFromMac('00-00-5E-00-53-01'), 906676);
  const iface = (mac: string, internal = false) => ({
    address: '10.0.0.1',
    netmask: '255.0.0.0',
    family: 'IPv4' as const,
    mac,
    internal,
    cidr: '10.0.0.1/8',
  });
  assert.deepEqual(
    findMac({
      lo: [iface('00:00:00:00:00:00', true)],
      wlan0: [iface('02:00:00:00:00:09')],
      eth1: [iface('02:00:00:00:00:02')],
      docker0: [iface('00:00:00:00:00:00')],
    }),
    { interface: 'eth1', mac: '02:00:00:00:00:02' },
  );
  assert.equal(findMac({ lo: [iface('00:00:00:00:00:00', true)] }), null);
  assert.equal(findMac({}), null);
});

test('bad input: wrong length, misplaced hyphens, U and punctuation, out-of-day ticks, out-of-range fields', () => {
  for (const bad of [
    '',
    '00jtx-04fecrkm-0cgm-3',
    '00jtx-04fecrkm-0cgm-3nn',
    '00jt-x04fecrkm-0cgm-3n',
    '00utx-04fecrkm-0cgm-3n',
    '00jtx-04fecrkm-0cgm-3_',
    '00jtx04fecrkm0cgm3n-',
    '00jtx 04fecrkm 0cgm 3n',
    '00jtx-zzzzzzzz-0cgm-3n', // 2^40 − 1 ticks: past the end of a day
  ]) {
    assert.throws(() => lsid.parse(bad), is('INVALID_ID'), bad);
  }
  assert.throws(
    () => lsid.encode({ day: 0, ticks: 864_000_000_000, worker: 0, sequence: 0 }),
    is('OUT_OF_RANGE'),
  );
  assert.throws(() => lsid.encode({ day: 2 ** 25, ticks: 0, worker: 0, sequence: 0 }), is('OUT_OF_RANGE'));
  assert.throws(() => lsid.createGenerator({ worker: 2 ** 20 }), is('OUT_OF_RANGE'));
  assert.throws(() => lsid.createGenerator({ sequence: 1024 }), is('OUT_OF_RANGE'));
});
