// A router process that stops dead at one named step of a reference write's commit, for the parent to kill -9:
//   node crash-child.js CONFIG POINT NAME
// POINT: after-first-prepare | after-decision. At the point it prints `AT <point> <gid> <server>` and blocks its
// only thread, so nothing after the step is sent.
import { createRouter, type TransactionEvent } from 'shardflake';
import { loadConfig } from '../../packages/shardflake/src/config/config.js';

const [configFile, point, name] = process.argv.slice(2) as [string, string, string];
const config = await loadConfig(configFile);
const stop = (event: TransactionEvent) => {
  process.stdout.write(`AT ${point} ${event.gid ?? '-'} ${event.server}\n`);
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
};
const router = await createRouter(config, {
  transactions: { recovery: false },
  onEvent(event) {
    if (event.type !== 'transaction') return;
    const step = `${event.phase}:${event.step}`;
    if (point === 'after-first-prepare' && step === 'prepare:done') stop(event);
    if (point === 'after-decision' && step === 'decide:done') stop(event);
  },
});
await router.withReference((s) => s.query('INSERT INTO plans (name) VALUES ($1)', [name]));
process.stdout.write('COMMITTED\n');
await router.close();
