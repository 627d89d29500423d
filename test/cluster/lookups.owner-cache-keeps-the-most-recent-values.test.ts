import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MAX_CACHED_VALUE, OwnerCache } from '../../packages/shardflake/src/lookups/owner-cache.js';

/**
 * The owner cache's bound (lookups/owner-cache.ts): at most `size` values, the least recently used one out first
 * (a `get` makes a value recent), values longer than MAX_CACHED_VALUE never kept, size 0 keeps nothing, and one
 * value of two lookups is two entries.
 */
test('keeps at most size values, least recently used out first, and no long values', () => {
  const cache = new OwnerCache(2);
  cache.set('l', 'a', 1);
  cache.set('l', 'b', 2);
  assert.equal(cache.get('l', 'a'), 1); // a is now the most recent
  cache.set('l', 'c', 3); // b goes
  assert.equal(cache.get('l', 'b'), undefined);
  assert.equal(cache.get('l', 'a'), 1);
  assert.equal(cache.get('l', 'c'), 3);
  assert.equal(cache.length, 2);
  cache.set('l', 'c', 0); // a new shard for a value replaces its old one
  assert.equal(cache.get('l', 'c'), 0);
  assert.equal(cache.length, 2);
  cache.set('other', 'c', 9);
  assert.equal(cache.get('other', 'c'), 9);
  assert.equal(cache.get('l', 'a'), undefined);
  cache.delete('other', 'c');
  assert.equal(cache.get('other', 'c'), undefined);

  cache.set('l', 'x'.repeat(MAX_CACHED_VALUE + 1), 4);
  assert.equal(cache.get('l', 'x'.repeat(MAX_CACHED_VALUE + 1)), undefined);
  cache.set('l', 'x'.repeat(MAX_CACHED_VALUE), 4);
  assert.equal(cache.get('l', 'x'.repeat(MAX_CACHED_VALUE)), 4);

  const none = new OwnerCache(0);
  none.set('l', 'a', 1);
  assert.equal(none.get('l', 'a'), undefined);
  assert.equal(none.length, 0);
});
