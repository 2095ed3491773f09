import assert from 'node:assert/strict';
import { test } from 'node:test';
import { cutToLength } from '../../src/lib/text.js';

test('text cut to a length never ends in half a character: a lone surrogate in a webhook made JSON receivers answer 500', () => {
  assert.equal(cutToLength('abc', 5), 'abc');
  assert.equal(cutToLength('abcdef', 3), 'abc');
  // '😀' is two UTF-16 units: a cut through it drops it whole.
  assert.equal(cutToLength('ab😀cd', 3), 'ab');
  assert.equal(cutToLength('ab😀cd', 4), 'ab😀');
  const cut = cutToLength('😀'.repeat(10), 7);
  assert.equal(cut, '😀'.repeat(3));
  assert.ok(Buffer.from(cut, 'utf8').toString('utf8') === cut, 'round-trips through UTF-8');
  assert.equal(JSON.stringify(cutToLength('x😀', 2)), '"x"');
});
