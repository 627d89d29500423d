// A process that claims one value of the `user_email` lookup (inserts a user) and stops for good at a named step
// of the commit — a cross-server transaction phase such as `prepare:start`, `decide:start` or `decide:done` — so
// that its parent can kill it there with SIGKILL. Run: node lookup-claimer.js CONFIG_JSON KEY VALUE STEP
import { createRouter } from 'shardflake';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';

const [configText, key, value, step] = process.argv.slice(2);
const config = validateConfig(JSON.parse(configText as string), 'claimer');
const router = await createRouter(config, {
  transactions: { recovery: false },
  onEvent(event) {
    if (event.type !== 'transaction' || `${event.phase}:${event.step}` !== step) return;
    // stdout on a pipe is synchronous on Linux: the parent sees the line before the thread stops for good.
    process.stdout.write(`at ${step}\n`);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  },
});
await router.insert('users', { name: 'claimer', email: value }, { key: Number(key) });
process.stdout.write('committed\n');
await router.close();
