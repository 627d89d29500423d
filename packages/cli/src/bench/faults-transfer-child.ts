// The coordinator of the `transfers-coordinator-killed` scenario of bench faults, as a process of its own:
//   node faults-transfer-child.js CONFIG PAIRS PREFIX POINT ARM_AFTER
// It runs one transfer writer per pair (faults-cross.ts) and prints `ACK <token>` for every transfer the router
// acknowledged. Once ARM_AFTER transfers were acknowledged, the next transaction event POINT (`prepare:done`,
// `decide:done`, `commit-prepared:done`) makes it print `AT <point> <txid>` and block its only thread for good, so
// nothing after that step is sent; the scenario kills it with SIGKILL there.
import { loadConfig } from 'shardflake/internal/config/config.js';
import { createRouter } from 'shardflake/internal/router/router.js';
import { type Pair, startLoops, transfer } from './faults-cross.js';

const [configFile, pairsJson, prefix, point, armAfter] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string,
];
const pairs = (JSON.parse(pairsJson) as { x: [number, string]; y: [number, string] }[]).map(
  (p): Pair => ({
    x: { shard: p.x[0], id: BigInt(p.x[1]) },
    y: { shard: p.y[0], id: BigInt(p.y[1]) },
  }),
);
let acknowledged = 0;
const router = await createRouter(await loadConfig(configFile), {
  telemetry: false,
  // The scenario settles what this process leaves in doubt, after killing it.
  transactions: { recovery: false },
  onEvent(event) {
    if (acknowledged < Number(armAfter)) return;
    if (event.type !== 'transaction' || `${event.phase}:${event.step}` !== point) return;
    process.stdout.write(`AT ${point} ${event.txid}\n`);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  },
});
const loops = startLoops(pairs.length, prefix, async (writer, n, token) => {
  await transfer(router, pairs[writer] as Pair, n, token);
  acknowledged++;
  process.stdout.write(`ACK ${token}\n`);
});
// Never reached when killed at its point; a run that does not reach the point ends after a minute.
await new Promise((r) => setTimeout(r, 60_000));
await loops.stop();
await router.close();
