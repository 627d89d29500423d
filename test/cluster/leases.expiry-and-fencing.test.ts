import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { isShardflakeError } from 'shardflake';
import { acquireLease, leasedGenerator } from '../../packages/shardflake/src/leases/leases.js';
import { createPool } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';

const [server] = await useServers(1);
const catalog = createPool(defined(server).url);
after(() => catalog.end());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('worker-id leases', () => {
  it('gives live processes different worker ids, and reuses a released one', async () => {
    const leases = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        acquireLease(catalog, { namespace: 'distinct', holder: `p${i}`, autoHeartbeat: false }),
      ),
    );
    const ids = leases.map((l) => l.workerId).sort((a, b) => a - b);
    assert.deepEqual(ids, [0, 1, 2, 3, 4, 5]);
    await defined(leases[2]).release();
    const again = await acquireLease(catalog, { namespace: 'distinct', autoHeartbeat: false });
    assert.equal(again.workerId, defined(leases[2]).workerId);
    assert.ok(again.token > defined(leases[5]).token, 'fencing tokens only grow');
    await Promise.all([...leases, again].map((l) => l.release()));
  });

  it('says NO_FREE_WORKER when every id is leased', async () => {
    const only = await acquireLease(catalog, { namespace: 'tiny', maxWorkers: 1, autoHeartbeat: false });
    await assert.rejects(acquireLease(catalog, { namespace: 'tiny', maxWorkers: 1 }), (e: unknown) =>
      isShardflakeError(e, 'NO_FREE_WORKER'),
    );
    await only.release();
  });

  it('stops a holder that missed its heartbeats: its generator refuses ids once the lease expired locally', async () => {
    let now = 0;
    const lease = await acquireLease(catalog, {
      namespace: 'clocked',
      layout: 'snowflake',
      ttlMs: 60_000,
      autoHeartbeat: false,
      clock: () => now,
    });
    const generator = leasedGenerator(lease);
    const id = generator.next();
    const worker = defined(lease.layout.field('worker'));
    assert.equal(Number((id >> BigInt(worker.shift)) & worker.max), lease.workerId);
    now = 47_999; // ttl 60 s − safety 12 s
    generator.next();
    now = 48_000;
    assert.equal(lease.isValid(), false);
    assert.throws(
      () => generator.next(),
      (e: unknown) => isShardflakeError(e, 'LEASE_LOST'),
    );
    await lease.release();
  });

  it('fences a holder whose lease expired and was taken over: heartbeat fails, the new holder has a larger token', async () => {
    const first = await acquireLease(catalog, {
      namespace: 'takeover',
      maxWorkers: 1,
      ttlMs: 300,
      safetyMs: 50,
      autoHeartbeat: false,
    });
    await sleep(400);
    const second = await acquireLease(catalog, {
      namespace: 'takeover',
      maxWorkers: 1,
      ttlMs: 30_000,
      autoHeartbeat: false,
    });
    assert.equal(second.workerId, first.workerId);
    assert.ok(second.token > first.token);
    await assert.rejects(first.heartbeat(), (e: unknown) => isShardflakeError(e, 'LEASE_LOST'));
    assert.equal(first.isValid(), false);
    assert.throws(
      () => leasedGenerator(first).next(),
      (e: unknown) => isShardflakeError(e, 'LEASE_LOST'),
    );
    assert.equal(second.isValid(), true);
    leasedGenerator(second).next();
    await second.release();
  });

  it('keeps a lease alive with heartbeats past its ttl', async () => {
    // Heartbeats every ttl/3: a lease stays valid only while a renewal completes within ttl − safety of being
    // sent. With a 300 ms ttl a 150 ms stall lost it; round trips to a busy server reach 80 ms. Twice the ttl
    // still spans several renewals.
    const lease = await acquireLease(catalog, {
      namespace: 'alive',
      maxWorkers: 1,
      ttlMs: 1000,
      safetyMs: 50,
    });
    await sleep(2000);
    assert.equal(lease.isValid(), true);
    await assert.rejects(acquireLease(catalog, { namespace: 'alive', maxWorkers: 1 }), (e: unknown) =>
      isShardflakeError(e, 'NO_FREE_WORKER'),
    );
    await lease.release();
  });
});
