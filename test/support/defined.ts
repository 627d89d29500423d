import assert from 'node:assert/strict';

/**
 * The value, asserted to be there. Tests index arrays and look things up that they expect to find; with a `!`
 * a missing one surfaces later as an unrelated TypeError, here it fails on the spot and says so.
 */
export function defined<T>(value: T | null | undefined, what = 'an expected value'): T {
  assert.ok(value !== undefined && value !== null, `${what} is missing`);
  return value;
}
