import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { components, findDeadlocks } from '../../packages/shardflake/src/deadlocks/cycles.js';
import { buildGraph, intersect, type WaitRow } from '../../packages/shardflake/src/deadlocks/graph.js';
import { formatTag, parseTag, younger } from '../../packages/shardflake/src/deadlocks/tag.js';

// The graph and the choice of victim on hand-made readings of the servers (what WAIT_EDGES_SQL returns): the rules
// of graph.ts and cycles.ts, each with the case a wrong implementation gets wrong.

const tag = (txid: string, born: number) => formatTag({ txid, born });
/** A wait on one server: pid `w` (application_name `wn`) waits for pid `b` (`bn`). */
const wait = (w: number, wn: string | null, b: number, bn: string | null): WaitRow => ({
  waiter: w,
  waiter_name: wn,
  blocker: b,
  blocker_name: bn,
});
const readings = (entries: Record<string, WaitRow[]>) => new Map(Object.entries(entries));

const T1 = tag('aaaa01', 1_000);
const T2 = tag('aaaa02', 2_000);
const T3 = tag('aaaa03', 3_000);

describe('the tag', () => {
  it('round-trips, refuses other application names, and orders by birth then txid', () => {
    assert.deepEqual(parseTag(formatTag({ txid: 'lx2k9abc0123456789ab', born: 1_700_000_000_000 })), {
      txid: 'lx2k9abc0123456789ab',
      born: 1_700_000_000_000,
    });
    for (const other of [
      null,
      '',
      'shardflake router',
      'shardflake tx',
      'shardflake tx a',
      'shardflake tx a b c',
      'shardflake tx A! 1',
    ])
      assert.equal(parseTag(other), undefined, String(other));
    assert.ok(formatTag({ txid: 'x'.repeat(20), born: Date.now() }).length <= 63, 'fits application_name');
    assert.ok(younger({ txid: 'a', born: 2 }, { txid: 'z', born: 1 }));
    assert.ok(younger({ txid: 'b', born: 1 }, { txid: 'a', born: 1 }), 'a tie goes by txid');
  });
});

describe('the graph and its deadlocks', () => {
  it('opposite transfers: each server sees one wait on an idle session; joined by tag they are a cycle, and the youngest is its victim', () => {
    // On a: T2's session (pid 11) waits for T1's (pid 10). On b: T1's (pid 20) waits for T2's (pid 21).
    const graph = buildGraph(readings({ a: [wait(11, T2, 10, T1)], b: [wait(20, T1, 21, T2)] }));
    assert.equal(graph.nodes.size, 2, 'one node per transaction, whatever the server');
    const [deadlock, ...more] = findDeadlocks(graph);
    assert.equal(more.length, 0);
    assert.deepEqual(deadlock?.servers, ['a', 'b']);
    assert.deepEqual(
      deadlock?.transactions.map((t) => t.txid),
      ['aaaa01', 'aaaa02'],
      'oldest first',
    );
    assert.equal(deadlock?.victim.txid, 'aaaa02');
    // Each server alone: no cycle.
    assert.deepEqual(findDeadlocks(buildGraph(readings({ a: [wait(11, T2, 10, T1)] }))), []);
  });

  it('a cycle through a session of another client (an untagged withShard) is joined through the tagged ones, and the victim is tagged', () => {
    // a: T1 (pid 10) waits for a plain session 30; 30 waits for T2 (pid 11). b: T2 (21) waits for T1 (20).
    const graph = buildGraph(
      readings({
        a: [wait(10, T1, 30, 'shardflake router'), wait(30, 'shardflake router', 11, T2)],
        b: [wait(21, T2, 20, T1)],
      }),
    );
    const [deadlock] = findDeadlocks(graph);
    assert.equal(deadlock?.members.length, 3);
    assert.equal(deadlock?.victim.txid, 'aaaa02');
    // Were the plain session younger than both (it carries no age at all), it still could not be chosen.
    assert.ok(deadlock?.members.includes('30@a'));
  });

  it('a deadlock all on one server is left to PostgreSQL', () => {
    const graph = buildGraph(readings({ a: [wait(10, T1, 11, T2), wait(11, T2, 10, T1)] }));
    assert.equal(components(graph).length, 1, 'it is a cycle');
    assert.deepEqual(findDeadlocks(graph), [], 'but not one across servers');
  });

  it('a prepared transaction (blocker pid 0) waits for nothing: never on a cycle, never a victim', () => {
    // T3 waits on a for a prepared transaction, and T1 waits on b for T3: a chain, not a cycle.
    const graph = buildGraph(readings({ a: [wait(12, T3, 0, null)], b: [wait(20, T1, 22, T3)] }));
    assert.ok(graph.nodes.has('prepared@a'));
    assert.deepEqual(findDeadlocks(graph), []);
    // Even two prepared transactions on two servers, each "blocking" the other's waiter, are no node with edges out.
    assert.equal(graph.edges.filter((e) => e.from.startsWith('prepared')).length, 0);
  });

  it('a queue of waiters on one row (many soft edges) around a cycle is one component with one victim, found in linear time', () => {
    // T1 and T2 deadlock across a and b; 300 other transactions queue on a behind T1, each blocked by T1 and by
    // every conflicting waiter ahead of it (pg_blocking_pids reports both): 45 000 edges, 2^300 paths.
    const queue = Array.from({ length: 300 }, (_, i) => ({ pid: 100 + i, name: tag(`bbbb${i}`, 500 + i) }));
    const rows: WaitRow[] = [wait(11, T2, 10, T1)];
    queue.forEach((q, i) => {
      rows.push(wait(q.pid, q.name, 10, T1));
      for (const ahead of queue.slice(0, i)) rows.push(wait(q.pid, q.name, ahead.pid, ahead.name));
    });
    const started = performance.now();
    const found = findDeadlocks(buildGraph(readings({ a: rows, b: [wait(20, T1, 21, T2)] })));
    // Seconds would mean paths were being walked; a linear pass takes milliseconds (more on a loaded machine).
    assert.ok(performance.now() - started < 5000, 'linear, not a walk of paths');
    assert.equal(found.length, 1);
    assert.deepEqual(
      [...(found[0]?.members ?? [])].sort(),
      ['tx:aaaa01', 'tx:aaaa02'],
      'the queue waits, it is not in the cycle',
    );
  });

  it('overlapping cycles: the youngest of the component goes, and only a cycle it leaves standing takes another victim', () => {
    // T1 ↔ T2 across a and b, T2 ↔ T3 across b and c: T3 (youngest) breaks T2 ↔ T3; T1 ↔ T2 still stands, and
    // its own youngest, T2, goes too — in the same reading.
    const chain = buildGraph(
      readings({
        a: [wait(10, T1, 11, T2)],
        b: [wait(21, T2, 20, T1), wait(22, T2, 23, T3)],
        c: [wait(33, T3, 32, T2)],
      }),
    );
    assert.deepEqual(
      findDeadlocks(chain).map((d) => [d.victim.txid, d.servers.join('')]),
      [
        ['aaaa03', 'abc'],
        ['aaaa02', 'ab'],
      ],
    );
    // T1 → T2 → T3 → T1 around a, b, c, and T3 ↔ T1 also directly across c and a: T3 lies on both cycles, and is
    // the only victim.
    const sharedYoungest = buildGraph(
      readings({
        a: [wait(11, T1, 12, T2), wait(13, T3, 11, T1)],
        b: [wait(22, T2, 23, T3)],
        c: [wait(31, T1, 33, T3)],
      }),
    );
    assert.deepEqual(
      findDeadlocks(sharedYoungest).map((d) => d.victim.txid),
      ['aaaa03'],
    );
  });

  it('a cycle seen in one reading only (an edge gone by the second) is not acted on', () => {
    const first = buildGraph(readings({ a: [wait(11, T2, 10, T1)], b: [wait(20, T1, 21, T2)] }));
    const second = buildGraph(readings({ a: [], b: [wait(20, T1, 21, T2)] }));
    assert.equal(findDeadlocks(first).length, 1);
    assert.deepEqual(findDeadlocks(intersect(first, second)), []);
    assert.equal(findDeadlocks(intersect(first, first)).length, 1);
  });
});
