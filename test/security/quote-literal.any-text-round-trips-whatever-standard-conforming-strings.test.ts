import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { quoteLiteral } from '../../packages/shardflake/src/postgres/identifier.js';
import { useServers } from '../support/postgres.js';

/**
 * quoteLiteral is used where a value cannot be a bind parameter (DDL). With the plain '…' form, a server (or a
 * session) with standard_conforming_strings = off reads a backslash as an escape: `\'` would end the literal
 * early and the rest would run as SQL. The E'…' form reads the same under both settings.
 */
test('quoteLiteral round-trips any text, backslashes and quotes included, with standard_conforming_strings on and off', async () => {
  const [server] = await useServers(1);
  const c = await connect((server as { url: string }).url);
  try {
    for (const setting of ['on', 'off']) {
      await c.query(`SET standard_conforming_strings = ${setting}`);
      await fc.assert(
        fc.asyncProperty(
          fc.oneof(
            fc.string({ unit: 'grapheme', maxLength: 30 }),
            fc
              .array(fc.constantFrom('\\', "'", 'a', ';', '"', '$', '\n'), { maxLength: 30 })
              .map((a) => a.join('')),
          ),
          async (text) => {
            const { rows } = await c.query(`SELECT ${quoteLiteral(text)} AS v, 1 AS one`);
            assert.equal(rows.length, 1);
            assert.equal(rows[0].v, text, `standard_conforming_strings = ${setting}`);
          },
        ),
        { numRuns: 300 },
      );
      // The classic escape: a trailing backslash before the closing quote.
      const { rows } = await c.query(`SELECT ${quoteLiteral("x\\'; SELECT 'injected")} AS v`);
      assert.equal(rows[0].v, "x\\'; SELECT 'injected");
    }
    assert.throws(() => quoteLiteral('a\0b'), /without NUL/);
  } finally {
    await c.end();
  }
});
