import { test } from 'node:test';
import assert from 'node:assert/strict';
import { instantOfLocalTime, utcOffsetMinutes } from '../../src/lib/time-zone.js';

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

test('one rule around a change on either side of UTC: a skipped time comes as late as the skip, never early; a repeated time is its first occurrence', () => {
  // Spring forward: 02:30 in New York and Prague, 00:30 in Santiago (the change at midnight), 01:30 in London do not exist.
  assert.equal(at('America/New_York', '2026-03-08T02:30:00Z'), '2026-03-08T07:30:00.000Z'); // 03:30 EDT, not 01:30 EST
  assert.equal(at('America/Santiago', '2026-09-06T00:30:00Z'), '2026-09-06T04:30:00.000Z'); // 01:30 that day, not 23:30 the day before
  assert.equal(at('Europe/Prague', '2026-03-29T02:30:00Z'), '2026-03-29T01:30:00.000Z'); // 03:30 CEST
  assert.equal(at('Europe/London', '2026-03-29T01:30:00Z'), '2026-03-29T01:30:00.000Z'); // 02:30 BST
  // Fall back: the first 01:30 on both sides of UTC (New York took the first, London, Lord Howe and Chatham the second).
  assert.equal(at('America/New_York', '2026-11-01T01:30:00Z'), '2026-11-01T05:30:00.000Z'); // EDT
  assert.equal(at('Europe/London', '2026-10-25T01:30:00Z'), '2026-10-25T00:30:00.000Z'); // BST
  assert.equal(at('Australia/Lord_Howe', '2026-04-05T01:45:00Z'), '2026-04-04T14:45:00.000Z'); // +11, before the half-hour step back
  assert.equal(at('Pacific/Chatham', '2026-04-05T02:50:00Z'), '2026-04-04T13:05:00.000Z'); // +13:45, before +12:45
  // Every other time of the year is exact: each quarter hour of 2026 in a few zones maps back to itself.
  for (const zone of ['America/New_York', 'Europe/London', 'Australia/Lord_Howe', 'Asia/Kathmandu', 'America/Santiago']) {
    for (let wall = Date.parse('2026-01-01T00:00:00Z'); wall < Date.parse('2027-01-01T00:00:00Z'); wall += 15 * 60_000) {
      const instant = instantOfLocalTime(wall, zone);
      const shown = instant + utcOffsetMinutes(zone, instant) * 60_000;
      // Shown as asked, or (skipped) later by the skip, at most an hour.
      assert.ok(shown === wall || (shown > wall && shown - wall <= 3_600_000), `${zone} ${new Date(wall).toISOString()} → ${new Date(instant).toISOString()}`);
    }
  }
});
