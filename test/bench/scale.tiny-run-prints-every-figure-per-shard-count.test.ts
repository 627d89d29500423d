import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startCli } from '../support/cli.js';

/**
 * A tiny `shardflake bench scale` (8 and 16 shards on 2 servers, 100 rows, passes over every shard with no bound,
 * 256 and 2 shards per connection, a migration and a rebalance onto a third server under a writer, a map version
 * with 10 routers listening): the table has a column per shard count and a line for every figure, each filled with a number (router.sql's answers were checked against the one
 * table's, or the run would have stopped); a bad shard list is one INVALID_ARGUMENT line, exit 2.
 */
const FIGURES = [
  'init ms per shard',
  'createRouter ms',
  'router RSS delta MB',
  ...['aggregate', 'order+limit'].flatMap((query) => [
    `sql ${query} first ms`,
    ...['', ' unprepared', ' warm', ' prepared'].flatMap((way) => [
      `sql ${query}${way} p50 ms`,
      `sql ${query}${way} ratio`,
    ]),
  ]),
  'backend max RssAnon MB',
  'backend max VmRSS MB',
  'insert p50 ms hot/random',
  'insert random/hot',
  'get p50 ms hot/random',
  'get random/hot',
  ...['none', '256', '2'].flatMap((bound) =>
    [
      'backend max RssAnon MB',
      'connections opened',
      'first insert/get p50 ms',
      'first insert/hot insert',
      'last pass insert p50 ms',
      'seconds',
    ].map((figure) => `pass, shardsPerConnection ${bound}: ${figure}`),
  ),
  'migrate seconds',
  'writer inserts/s alone/migrating',
  'writer throughput migrating/alone',
  'writer p99 ms alone/migrating',
  'writer longest ms alone/migrating',
  'map version: shard rows a router read',
  'map version: ms until every router had it',
  'map version: catalog connections of routers',
  'catalog read ms changes/whole map',
  'rebalance shards moved (sets)',
  'rebalance s per shard',
  'rebalance longest pause ms',
  'rebalance s prepare/copy/cutover/finish',
  'writer throughput rebalancing/alone',
  'writer p99 ms alone/rebalancing',
  'writer longest ms alone/rebalancing',
];

test('bench scale: a column per shard count, a line per figure, each a number', async () => {
  const args = ['bench', 'scale', '--shards', '8,16', '--servers', '2', '--rows', '100'];
  const run = await startCli([
    ...args,
    '--samples',
    '20',
    '--repeat',
    '2',
    '--pass-bounds',
    '0,256,2',
    '--pass-rounds',
    '1',
    '--writer-alone-seconds',
    '1',
  ]).done;
  assert.equal(run.code, 0, run.stderr);
  const lines = run.stdout.split('\n');
  assert.match(lines.find((l) => l.startsWith('shards ')) ?? '', /^shards\s+8\s+16$/);
  for (const figure of FIGURES) {
    const line = lines.find((l) => l.startsWith(`${figure} `));
    assert.ok(line, `no line for ${figure}:\n${run.stdout}`);
    const cells = line
      .slice(figure.length)
      .trim()
      .split(/\s{2,}/);
    assert.equal(cells.length, 2, `${figure}: ${line}`);
    // The router's RSS delta can be negative: a collection may run during createRouter (no --expose-gc here).
    const number = figure === 'router RSS delta MB' ? /^-?[0-9.,]+/ : /^[0-9.,]+/;
    for (const cell of cells) assert.match(cell, number, `${figure}: ${line}`);
  }
  // A map version that changed one shard: each router read that one row, and the routers hold one catalog
  // connection each.
  const line = (figure: string) => lines.find((l) => l.startsWith(`${figure} `)) ?? '';
  assert.match(line('map version: shard rows a router read'), /^\S.*\s1 \(changes\)\s+1 \(changes\)$/);
  assert.match(line('map version: catalog connections of routers'), /10 of 10\s+10 of 10$/);
  assert.match(run.stdout, /load average [0-9.]+ before, [0-9.]+ after/);

  const bad = await startCli(['bench', 'scale', '--shards', '8,x']).done;
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--shards must be shard counts from 1 to 8192 separated by commas, not "8,x"/);
});
