import { startEmbeddedServers } from '@shardflake/embedded';
import { createRouter, initCluster, validateConfig } from 'shardflake';

const servers = await startEmbeddedServers(2);
try {
  const config = validateConfig(
    {
      servers: { a: servers[0].url, b: servers[1].url },
      catalog: 'a',
      logicalShards: 4,
      tables: {
        wallets: 'CREATE TABLE wallets (owner text PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0))',
      },
    },
    'example',
  );
  await initCluster(config);
  const router = await createRouter(config);
  const open = (owner, balance) =>
    router.withShard({ key: owner }, (s) => s.query('INSERT INTO wallets VALUES ($1, $2)', [owner, balance]));
  await open('alice', 100);
  await open('bob', 0);
  const where = (owner) => router.placement(router.shardFor(owner)).server;
  console.log('alice lives on server', where('alice'), 'and bob on server', where('bob'));

  // One session per target, in the targets' order; both updates commit, or neither does.
  const transfer = (from, to, amount) =>
    router.withShards([{ key: from }, { key: to }], async ([payer, payee]) => {
      await payee.query('UPDATE wallets SET balance = balance + $2 WHERE owner = $1', [to, amount]);
      await payer.query('UPDATE wallets SET balance = balance - $2 WHERE owner = $1', [from, amount]);
    });
  await transfer('alice', 'bob', 30);
  // Bob's credit succeeds, alice's debit breaks the CHECK: the credit is rolled back with it.
  await transfer('alice', 'bob', 500).catch((error) => console.log('refused:', error.code, error.sqlState));

  const balance = async (owner) =>
    router.withShard({ key: owner }, async (s) => {
      const { rows } = await s.query('SELECT balance FROM wallets WHERE owner = $1', [owner]);
      return rows[0].balance;
    });
  console.log('alice', await balance('alice'), 'bob', await balance('bob'));
  await router.close();
} finally {
  await Promise.all(servers.map((s) => s.stop()));
}
