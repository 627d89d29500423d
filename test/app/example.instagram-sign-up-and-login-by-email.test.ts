import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createRouter, type Router } from 'shardflake';
import { Accounts, EmailTakenError } from '../../examples/instagram/accounts.js';
import { LOOKUPS, TABLES } from '../../examples/instagram/schema.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

const servers = await useServers(2);
const config = testConfig(servers, { logicalShards: 8, tables: TABLES, lookups: LOOKUPS });
let router: Router;

before(async () => {
  await initCluster(config);
  router = await createRouter(config);
});
after(async () => {
  await router?.close();
});

test('the example app signs users up and logs them in by email through the lookup; an email has one account, also when many sign up with it at once', async () => {
  const accounts = new Accounts(router);
  const ann = await accounts.signUp('ann', 'Ann@Example.com', 'secret 1');
  const bob = await accounts.signUp('bob', 'bob@example.com', 'secret 2');
  assert.notEqual(router.shardOfId(ann), undefined);
  assert.equal(await accounts.login('ann@example.com', 'secret 1'), ann);
  assert.equal(await accounts.login(' ANN@example.com', 'secret 1'), ann);
  assert.equal(await accounts.login('bob@example.com', 'secret 2'), bob);
  assert.equal(await accounts.login('bob@example.com', 'secret 1'), null, 'wrong password');
  assert.equal(await accounts.login('nobody@example.com', 'secret 1'), null, 'no such email');
  await assert.rejects(accounts.signUp('ann2', 'ann@example.com', 'x'), EmailTakenError);

  // Eight sign-ups with one new email, from users on different shards and servers, at once: exactly one account.
  const names = Array.from({ length: 8 }, (_, i) => `racer${i}`);
  const results = await Promise.allSettled(names.map((n) => accounts.signUp(n, 'race@example.com', 'pw')));
  const won = results.filter((r) => r.status === 'fulfilled');
  assert.equal(won.length, 1);
  for (const r of results)
    if (r.status === 'rejected') assert.ok(r.reason instanceof EmailTakenError, String(r.reason));
  assert.equal(
    await accounts.login('race@example.com', 'pw'),
    (won[0] as PromiseFulfilledResult<bigint>).value,
  );
  // The losers' users were rolled back with their accounts.
  const users = await router.queryByShard({
    sql: (t) => `SELECT name FROM ${t('users')} WHERE name LIKE 'racer%'`,
  });
  assert.equal([...users.values()].flat().length, 1);
});
