import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  SLOW_PATH_FUNCTIONS,
  SLOW_PATH_PLACEHOLDER,
  SYSTEM_CLOCK_MS,
  slowPathBody,
} from '../../packages/shardflake/src/postgres/slow-path-sql.js';

/*
 * The races, clock steps, cancels and the exhausted layout are tested on test-clock installs, whose shards call the
 * shared slow path's test variant (`new_era_test`, `catch_up_test`). That proves the production body only if the two
 * are the same text but for the clock they read and the pause hook: this holds them to it.
 */
test('the test variant of the shared slow path is the production body but for its clock and pause hook', () => {
  const testClock = `${SLOW_PATH_PLACEHOLDER}.${SLOW_PATH_FUNCTIONS.testClock}(counter)`;
  const pause = `    PERFORM ${SLOW_PATH_PLACEHOLDER}.${SLOW_PATH_FUNCTIONS.testPause}(counter);\n`;
  for (const withAbove of [false, true]) {
    const production = slowPathBody(withAbove, false);
    const forTests = slowPathBody(withAbove, true);
    assert.ok(forTests.includes(testClock) && forTests.includes(pause));
    assert.ok(!production.includes(SLOW_PATH_PLACEHOLDER), 'no indirection in the production body');
    assert.equal(forTests.replace(testClock, SYSTEM_CLOCK_MS).replace(pause, ''), production);
  }
});
