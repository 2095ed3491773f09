import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ManualClock } from '../../src/lib/clock.js';
import { createIdGenerator, idPattern } from '../../src/lib/ids.js';

test('ids sort in creation order, also when the counter wraps within a second or the clock steps back', () => {
  const clock = new ManualClock('2026-03-01T12:00:00.000Z');
  const newId = createIdGenerator('0123456789', 0xfffffd);
  const ids: string[] = [];
  for (let i = 0; i < 6; i++) ids.push(newId(clock)); // the counter passes 0xffffff → 0 here
  clock.advance(-5_000);
  ids.push(newId(clock));
  clock.advance(10_000);
  ids.push(newId(clock));
  for (const id of ids) assert.match(id, idPattern);
  assert.deepEqual([...ids].sort(), ids);
  assert.equal(new Set(ids).size, ids.length);
});
