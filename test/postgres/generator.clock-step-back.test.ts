import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect, ensureGeneratorAbove, installGenerator, lastIssuedId, layouts } from 'shardflake';
import { decodeId, encodeId } from '../../packages/shardflake/src/ids/codec.js';
import { qualified } from '../../packages/shardflake/src/postgres/identifier.js';
import { useServers } from '../support/postgres.js';
import { narrowLayout, setTestClock } from './generator-fixture.js';

async function ids(
  client: { query: (sql: string) => Promise<{ rows: { id: bigint }[] }> },
  schema: string,
  n: number,
) {
  const { rows } = await client.query(
    `SELECT ${qualified(schema, 'next_id')}() AS id FROM generate_series(1, ${n}) g ORDER BY g`,
  );
  return rows.map((r) => r.id);
}

function assertIncreasing(list: bigint[]): void {
  for (let i = 1; i < list.length; i++)
    assert.ok((list[i] as bigint) > (list[i - 1] as bigint), `id ${i} did not increase`);
}

test('when the clock steps back, ids keep increasing; when it catches up, they follow it again', async () => {
  const [server] = await useServers(1);
  const client = await connect((server as { url: string }).url);
  try {
    const schema = 'clock_test';
    await installGenerator(client, { schema, shard: 9, testClock: true });
    const t0 = Date.UTC(2030, 0, 1);
    await setTestClock(client, schema, t0);
    const first = await ids(client, schema, 3000); // 3000 ids in one frozen ms: the time bits run 2 ms ahead
    assertIncreasing(first);
    assert.equal(decodeId(first[0] as bigint, layouts.instagram).timestamp.getTime(), t0);
    assert.equal(decodeId(first.at(-1) as bigint, layouts.instagram).timestamp.getTime(), t0 + 2);

    await setTestClock(client, schema, t0 - 3_600_000); // an hour back
    const back = await ids(client, schema, 2000);
    assertIncreasing([...first, ...back]);
    for (const id of back) assert.equal(decodeId(id, layouts.instagram).fields.shard, 9);

    await setTestClock(client, schema, t0 + 60_000); // a minute after t0: ids follow the clock again
    const later = await ids(client, schema, 10);
    assertIncreasing([...back, ...later]);
    assert.equal(decodeId(later[0] as bigint, layouts.instagram).timestamp.getTime(), t0 + 60_000);
  } finally {
    await client.end();
  }
});

test('production SQL: state moved ahead of the clock (as after a step back, or a move from a server whose clock led)', async () => {
  const [server] = await useServers(1);
  const client = await connect((server as { url: string }).url);
  try {
    const schema = 'moved_shard';
    await installGenerator(client, { schema, shard: 12 });
    assert.equal(await lastIssuedId(client, schema), null);
    const now = await ids(client, schema, 5);
    assert.ok(((await lastIssuedId(client, schema)) as bigint) >= (now.at(-1) as bigint));

    // The old server issued ids an hour ahead of this server's clock.
    const ahead = encodeId(
      { timestamp: Date.now() + 3_600_000, shard: 12, sequence: 700 },
      layouts.instagram,
    );
    await ensureGeneratorAbove(client, schema, ahead);
    const next = await ids(client, schema, 5000);
    assert.ok((next[0] as bigint) > ahead);
    assertIncreasing(next);
    const last = (await lastIssuedId(client, schema)) as bigint;
    assert.ok(last >= (next.at(-1) as bigint));

    // Never backwards: asking for a floor below the current state changes nothing.
    await ensureGeneratorAbove(client, schema, now[0] as bigint);
    const after = await ids(client, schema, 1);
    assert.ok((after[0] as bigint) > (next.at(-1) as bigint));
  } finally {
    await client.end();
  }
});

test('above 2^seqBits ids per tick the time bits run ahead of the clock, by at most ids / 2^seqBits ticks', async (t) => {
  const [server] = await useServers(1);
  const client = await connect((server as { url: string }).url);
  try {
    // 2 sequence bits: 4 ids per ms, so a single statement outruns the clock by far, even on a loaded machine
    // (50,000 ids are 12.5 s of time bits; the statement takes well under a second).
    const perTick = 4;
    const layout = narrowLayout;
    await installGenerator(client, { schema: 'narrow', shard: 1, layout });
    const n = 50_000;
    const { rows } = await client.query(
      `SELECT count(DISTINCT id)::int AS d, max(id) AS max_id, clock_timestamp() AS done_at
       FROM (SELECT ${qualified('narrow', 'next_id')}() AS id FROM generate_series(1, ${n})) s`,
    );
    assert.equal(rows[0].d, n);
    const last = decodeId(rows[0].max_id as bigint, layout).timestamp.getTime();
    const ahead = last - (rows[0].done_at as Date).getTime();
    // Ahead, but never by more than the ids issued divided by the ids a tick holds. (The span from first to last
    // id can exceed n / perTick when the clock overtakes the counter mid-statement and a catch-up jumps it.)
    assert.ok(ahead > 0 && ahead <= n / perTick, `ran ${ahead} ms ahead`);
    t.diagnostic(
      `${n} ids at ${perTick} per ms: time bits ${ahead} ms ahead of the clock when the statement ended`,
    );
  } finally {
    await client.end();
  }
});
