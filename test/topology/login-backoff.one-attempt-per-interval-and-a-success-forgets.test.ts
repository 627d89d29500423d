import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AuthFailedError, isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { loginMemory } from '../../packages/shardflake/src/topology/login-backoff.js';

/**
 * The rule of topology/login-backoff.ts, driven by a clock the test sets: after a refused login every acquire fails
 * at once (not dialling) until the wait is over, then exactly one acquire dials while the others wait for it; the
 * wait doubles up to its maximum; a login that succeeds forgets the refusals. The real servers' side (a router
 * that cannot log in leaves nothing open) is test/move/move.router-that-cannot-log-in-….
 */
const refusal = () =>
  Object.assign(new Error('password authentication failed for user "app"'), { code: '28P01' });

function setup() {
  let now = 0;
  let dials = 0;
  let accept = false;
  const memory = loginMemory('c', {
    urls: ['postgres://app@127.0.0.1:5432/db'],
    hint: 'put it somewhere',
    firstWaitMs: 1000,
    maxWaitMs: 4000,
    clock: () => now,
  });
  const dial = () =>
    memory.guard(async () => {
      dials++;
      await new Promise((resolve) => setTimeout(resolve, 5));
      if (!accept) throw refusal();
      return 'lease';
    });
  return {
    dial,
    get dials() {
      return dials;
    },
    at: (ms: number) => {
      now = ms;
    },
    accept: () => {
      accept = true;
    },
  };
}

test('a refused login is AUTH_FAILED naming server, role and hint; until its wait is over no acquire dials', async () => {
  const s = setup();
  await assert.rejects(s.dial(), (e: unknown) => {
    assert.ok(e instanceof AuthFailedError && e.code === 'AUTH_FAILED');
    assert.equal(
      e.message,
      'server c (postgres://app@127.0.0.1:5432/db) refused the login of role app (password authentication failed); put it somewhere',
    );
    assert.deepEqual(
      [e.server, e.role, e.reason, e.hint, e.sqlState, e.detail],
      ['c', 'app', 'password authentication failed', 'put it somewhere', '28P01', undefined],
    );
    return true;
  });
  for (const t of [0, 500, 999]) {
    s.at(t);
    await assert.rejects(
      s.dial(),
      (e: unknown) => isShardflakeError(e, 'AUTH_FAILED') && /^not tried/.test(String(e.detail)),
    );
  }
  assert.equal(s.dials, 1);
});

test('once the wait is over, of many concurrent acquires exactly one dials; the wait doubles up to its maximum', async () => {
  const s = setup();
  await s.dial().catch(() => {});
  // Waits 1000, 2000, 4000, 4000 (the maximum): at each end, 10 callers at once, one dial.
  let t = 0;
  for (const wait of [1000, 2000, 4000, 4000]) {
    s.at(t + wait - 1);
    await assert.rejects(s.dial(), /refused the login/);
    const before = s.dials;
    t += wait;
    s.at(t);
    const results = await Promise.allSettled(Array.from({ length: 10 }, () => s.dial()));
    assert.ok(results.every((r) => r.status === 'rejected' && isShardflakeError(r.reason, 'AUTH_FAILED')));
    assert.equal(s.dials, before + 1, `one dial after a wait of ${wait} ms`);
  }
});

test('a login that succeeds after the wait forgets the refusal: the waiters get connections too', async () => {
  const s = setup();
  await s.dial().catch(() => {});
  s.accept();
  s.at(1000);
  const results = await Promise.all(Array.from({ length: 5 }, () => s.dial()));
  assert.deepEqual(results, ['lease', 'lease', 'lease', 'lease', 'lease']);
  s.at(1001);
  assert.equal(await s.dial(), 'lease');
});

test('errors that are not a refused login pass through and are not remembered', async () => {
  let calls = 0;
  const memory = loginMemory('c', { urls: ['postgres://app@h/db'], hint: 'h', clock: () => 0 });
  const down = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
  for (let i = 0; i < 3; i++)
    await assert.rejects(
      memory.guard(async () => {
        calls++;
        throw down;
      }),
      (e) => e === down,
    );
  assert.equal(calls, 3);
});
