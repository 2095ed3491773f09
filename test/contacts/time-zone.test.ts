import { test } from 'node:test';
import assert from 'node:assert/strict';
import { instantOfLocalTime, utcOffsetMinutes } from '../../src/contacts/time-zone.js';

/** Messenger's timezone scheduling: a wall time (given as if UTC) → the instant it is that time in a zone. */
const at = (zone: string, wall: string) => new Date(instantOfLocalTime(Date.parse(wall), zone)).toISOString();

test('a local time is found on either side of UTC, in summer and winter time', () => {
  assert.equal(at('Asia/Tokyo', '2026-06-02T09:00:00Z'), '2026-06-02T00:00:00.000Z');
  assert.equal(at('America/New_York', '2026-06-02T09:00:00Z'), '2026-06-02T13:00:00.000Z');
  assert.equal(at('America/New_York', '2026-01-15T09:00:00Z'), '2026-01-15T14:00:00.000Z');
  assert.equal(at('Asia/Kolkata', '2026-01-15T09:00:00Z'), '2026-01-15T03:30:00.000Z');
  assert.equal(at('UTC', '2026-01-15T09:00:00Z'), '2026-01-15T09:00:00.000Z');
  assert.equal(at('Pacific/Kiritimati', '2026-01-15T09:00:00Z'), '2026-01-14T19:00:00.000Z');
});

test('across a daylight-time change the offset of the answer is the one used, not that of the first guess', () => {
  // Europe/Prague moves to summer time at 01:00 UTC on 2026-03-29: 09:00 that day is 07:00 UTC, though
  // 09:00 read as UTC is already past the change and 09:00 UTC the day before is not.
  assert.equal(at('Europe/Prague', '2026-03-29T09:00:00Z'), '2026-03-29T07:00:00.000Z');
  assert.equal(at('Europe/Prague', '2026-03-29T01:30:00Z'), '2026-03-29T00:30:00.000Z');
  // A time that does not exist (02:30, skipped by the change) lands beside it, not a day off.
  const skipped = instantOfLocalTime(Date.parse('2026-03-29T02:30:00Z'), 'Europe/Prague');
  assert.ok(Math.abs(skipped - Date.parse('2026-03-29T01:00:00Z')) <= 3_600_000, new Date(skipped).toISOString());
  assert.equal(utcOffsetMinutes('Europe/Prague', Date.parse('2026-03-29T07:00:00Z')), 120);
});
