import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { test } from 'node:test';
import { serveDashboard } from '../../packages/cli/src/dashboard/server.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { makeCluster } from '../move/fixture.js';
import { useServers } from '../support/postgres.js';

function get(url: string, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; headers: Record<string, unknown>; body: string }>(
    (resolve, reject) => {
      const req = request(url, { headers }, (res) => {
        let body = '';
        res.on('data', (d) => {
          body += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      });
      req.on('error', reject);
      req.end();
    },
  );
}

/**
 * On a shared machine, 127.0.0.1 is reachable by every local user. With a token, the dashboard answers only
 * requests that carry it (header or the cookie set by one `/?token=` visit); wrong or missing tokens get 401 and
 * no cluster data.
 */
test('with a token the dashboard answers only requests that carry it; the token visit sets an HttpOnly cookie', async () => {
  const servers = await useServers(1);
  const config = await makeCluster(servers, 2);
  await assert.rejects(serveDashboard(config, { token: 'short' }), (e) =>
    isShardflakeError(e, 'INVALID_ARGUMENT'),
  );
  const token = randomBytes(24).toString('base64url');
  const dashboard = await serveDashboard(config, { token });
  try {
    for (const path of ['', 'api/status', 'api/moves']) {
      const none = await get(`${dashboard.url}${path}`);
      assert.equal(none.status, 401, `/${path} without a token`);
      assert.doesNotMatch(none.body, /shard|server a/i);
      const wrong = await get(`${dashboard.url}${path}`, { authorization: `Bearer ${token}x` });
      assert.equal(wrong.status, 401, `/${path} with a wrong token`);
      assert.equal((await get(`${dashboard.url}${path}`, { authorization: `Bearer ${token}` })).status, 200);
    }
    assert.equal(
      (await get(`${dashboard.url}api/status?token=${token}`)).status,
      401,
      'the query works on / only',
    );
    const visit = await get(`${dashboard.url}?token=${encodeURIComponent(token)}`);
    assert.equal(visit.status, 303);
    assert.equal(visit.headers.location, '/');
    const cookie = String(visit.headers['set-cookie']);
    assert.match(cookie, /HttpOnly; SameSite=Strict/);
    const status = await get(`${dashboard.url}api/status`, { cookie: cookie.split(';')[0] as string });
    assert.equal(status.status, 200);
    assert.match(status.body, /"servers"/);
  } finally {
    await dashboard.close();
  }
  // Without a token it stays as it was: open to requests for this address.
  const open = await serveDashboard(config);
  try {
    assert.equal((await get(`${open.url}api/status`)).status, 200);
  } finally {
    await open.close();
  }
});
