import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { useCrashCluster } from './support.js';

// A transaction over shards 0 (server a) and 1 (server b) has a as its last agent: a's COMMIT is the decision.
// A trigger on a's decision table records the synchronous_commit the decision row was written under — the
// setting its COMMIT runs with (the row and the COMMIT are in one transaction, and nothing sets it after). The
// servers, trigger included, are thrown away after the file.
const { urls, router } = await useCrashCluster();
const seen = async () => {
  const client = await connect(urls.a);
  try {
    const { rows } = await client.query<{ setting: string }>(
      'SELECT setting FROM decision_settings ORDER BY n',
    );
    await client.query('TRUNCATE decision_settings');
    return rows.map((r) => r.setting);
  } finally {
    await client.end();
  }
};

before(async () => {
  const client = await connect(urls.a);
  try {
    await client.query(`
      CREATE TABLE decision_settings (n bigserial PRIMARY KEY, setting text NOT NULL);
      CREATE FUNCTION record_setting() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO public.decision_settings (setting) VALUES (current_setting('synchronous_commit'));
          RETURN NEW;
        END $$;
      CREATE TRIGGER record_setting BEFORE INSERT ON shardflake.transactions
        FOR EACH ROW EXECUTE FUNCTION record_setting();`);
  } finally {
    await client.end();
  }
});

describe('the decision of a transaction across servers', () => {
  for (const [set, expected] of [
    ['off', 'on'],
    ['local', 'on'],
    ['remote_write', 'on'],
    ['on', 'on'],
    ['remote_apply', 'remote_apply'],
  ] as const) {
    it(`commits with synchronous_commit ${expected} when the session set ${set}`, async () => {
      await router.withShards([{ shard: 0 }, { shard: 1 }], async ([x, y]) => {
        await x?.query(`SET LOCAL synchronous_commit = ${set}`);
        await y?.query(`SET LOCAL synchronous_commit = ${set}`);
        await x?.query(`INSERT INTO marks (tag) VALUES ('sync-${set}')`);
        await y?.query(`INSERT INTO marks (tag) VALUES ('sync-${set}')`);
      });
      assert.deepEqual(await seen(), [expected]);
    });
  }
});
