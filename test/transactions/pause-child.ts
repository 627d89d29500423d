// A router process that stops at one step of a write across servers and goes on when told, for failover tests:
//   node pause-child.js CONFIG KIND POINT TAG GO
// KIND: shards (withShards over shards 0 and 1, a mark in each) | plans, features (withReference, two rows in that
// reference table) | lookup
// (withShard on shard 0 inserting a user whose email's lookup entry lives in shard 1).
// POINT: prepare-start | prepare-done | decide-start | decide-done (the transaction event of that phase and step,
// on the first participant it fires for) | in-fn (inside the callback, after its first statement).
// At the point it prints `AT <point> <txid or ->` and blocks its only thread — its connections stay open, nothing more is
// sent — until the file GO exists (or it is killed). Then it goes on and prints one line, `RESULT ok <calls>` or
// `RESULT error <code> <message>`, and exits.
import { existsSync } from 'node:fs';
import { createRouter, type RouterEvent } from 'shardflake';
import { loadConfig } from '../../packages/shardflake/src/config/config.js';

const [configFile, kind, point, tag, go] = process.argv.slice(2) as [string, string, string, string, string];
const config = await loadConfig(configFile);
let paused = false;
const pause = (txid = '-') => {
  if (paused) return;
  paused = true;
  process.stdout.write(`AT ${point} ${txid}\n`);
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  while (!existsSync(go)) Atomics.wait(sleeper, 0, 0, 20);
};
const router = await createRouter(config, {
  transactions: { recovery: false },
  replicas: { failoverWaitMs: 30_000, rediscoverMs: 50 },
  writeRetryMs: 30_000,
  onEvent(event: RouterEvent) {
    if (event.type === 'transaction' && `${event.phase}-${event.step}` === point) pause(event.txid);
  },
});
let calls = 0;
try {
  if (kind === 'shards') {
    await router.withShards([{ shard: 0 }, { shard: 1 }], async (sessions) => {
      calls++;
      for (const s of sessions) {
        await s.query('INSERT INTO marks (tag) VALUES ($1)', [tag]);
        if (point === 'in-fn') pause();
      }
    });
  } else if (kind === 'plans' || kind === 'features') {
    await router.withReference(async (s) => {
      calls++;
      await s.query(`INSERT INTO ${kind} (tag) VALUES ($1)`, [`${tag}-1`]);
      if (point === 'in-fn') pause();
      await s.query(`INSERT INTO ${kind} (tag) VALUES ($1)`, [`${tag}-2`]);
    });
  } else {
    let email = '';
    for (let i = 0; router.shardFor(email) !== 1; i++) email = `${tag}-${i}@example.com`;
    await router.withShard({ shard: 0 }, async (s) => {
      calls++;
      await s.query('INSERT INTO users (email) VALUES ($1)', [email]);
      if (point === 'in-fn') pause();
    });
  }
  process.stdout.write(`RESULT ok ${calls}\n`);
} catch (error) {
  const e = error as { code?: string; message?: string };
  process.stdout.write(`RESULT error ${e.code ?? 'none'} ${String(e.message).split('\n')[0]}\n`);
}
await router.close();
