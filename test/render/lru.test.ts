import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Lru, sourceChars } from '../../src/render/lru.js';

test('render caches: bounded by count, and by the characters of their sources where weighed', () => {
  const counted = new Lru<string, number>(2);
  for (const key of ['a', 'b', 'c']) counted.set(key, key.length);
  assert.deepEqual([counted.get('a'), counted.get('b'), counted.get('c')], [undefined, 1, 1], 'first in, first out');

  const weighed = new Lru<string, string>(1000, sourceChars(100));
  weighed.set('x'.repeat(20), 'one');
  weighed.set('y'.repeat(20), 'two');
  assert.equal(weighed.weight, 40);
  assert.equal(weighed.set('z'.repeat(30), 'too big'), 'too big', 'returned');
  assert.equal(weighed.get('z'.repeat(30)), undefined, 'a source over a quarter of the budget is not kept');
  for (let i = 0; i < 10; i++) weighed.set(`${i}`.repeat(20), `v${i}`);
  assert.ok(weighed.weight <= 100, `kept ${weighed.weight} characters`);
  assert.equal(weighed.size, 5);
  assert.equal(weighed.get('9'.repeat(20)), 'v9', 'the newest stays');
  weighed.set('9'.repeat(20), 'again');
  assert.equal(weighed.weight, 100, 'replacing an entry does not count it twice');
});
