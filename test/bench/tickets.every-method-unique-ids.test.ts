import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runTicketBench, TICKET_METHODS, ticketSection } from '../../packages/cli/src/bench/tickets.js';

test('ticket servers, range allocation and next_id() all hand out unique ids, measured in one run', async () => {
  const result = await runTicketBench({ ids: 200, rounds: 2, concurrency: 3, rangeSize: 50 });
  assert.deepEqual(result.methods.map((m) => m.method).sort(), [...TICKET_METHODS].sort());
  for (const m of result.methods) {
    assert.equal(m.duplicates, 0, `${m.method} duplicates`);
    assert.ok(m.idsPerSecond > 0 && m.rowsPerSecond > 0);
    assert.ok(m.insertP50Us > 0 && m.insertP50Us <= m.insertP99Us);
  }
  const byName = Object.fromEntries(result.methods.map((m) => [m.method, m]));
  assert.equal(byName['ticket servers (odd/even)']?.roundTripsPerId, 1, 'one round trip per ticket');
  assert.equal(byName['next_id() in the database']?.roundTripsPerId, 0, 'the INSERT makes the id');
  // Blocks of 50 per client: at most one trip per 50 ids plus a partly used block per client and round.
  assert.ok((byName['range allocation']?.roundTripsPerId ?? 1) <= 0.05);
  assert.equal(ticketSection(result).bars?.values.length, 3);
  assert.equal(result.interrupted, false);
});
