// A router process that stops dead at one named step of a cross-server commit, for the parent test to kill -9:
//   node crash-child.js CONFIG POINT SHARDS TAG
// POINT: after-first-prepare | after-decision | after-first-commit-prepared. At the point it prints one line
// (`AT <point> <gid of the step> <server>`) and blocks its only thread, so nothing after the step is sent.
import { createRouter, type TransactionEvent } from 'shardflake';
import { loadConfig } from '../../packages/shardflake/src/config/config.js';

const [configFile, point, shardList, tag] = process.argv.slice(2) as [string, string, string, string];
const config = await loadConfig(configFile);
const stop = (event: TransactionEvent, gid = event.gid) => {
  process.stdout.write(`AT ${point} ${gid ?? '-'} ${event.server}\n`);
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
};
let firstCommit: TransactionEvent | undefined;
const router = await createRouter(config, {
  transactions: { recovery: false },
  onEvent(event) {
    if (event.type !== 'transaction') return;
    const step = `${event.phase}:${event.step}`;
    if (point === 'after-first-prepare' && step === 'prepare:done') stop(event);
    if (point === 'after-decision' && step === 'decide:done') stop(event);
    if (point === 'after-first-commit-prepared' && step === 'commit-prepared:start') {
      // The first COMMIT PREPARED has been sent (its server finishes it whatever happens here); stop before the
      // second is: the parent waits for the first to land, then kills.
      if (firstCommit) stop(firstCommit);
      firstCommit = event;
    }
  },
});
await router.withShards(
  shardList.split(',').map((s) => ({ shard: Number(s) })),
  async (sessions) => {
    for (const s of sessions) await s.query('INSERT INTO marks (tag) VALUES ($1)', [tag]);
  },
);
process.stdout.write('COMMITTED\n');
await router.close();
