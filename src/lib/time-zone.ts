/**
 * IANA time zones through Intl (ICU's own database, shipped with Node): no table of our own to go stale.
 * A contact's `timezone` must name one (spec §4.5 "valid timezone"); its `timezoneUtcOffset` is derived,
 * for the contact query once per zone of the project's contacts (contacts/query.ts utcOffsetCondition).
 */
const formatters = new Map<string, Intl.DateTimeFormat>();

function offsetFormatter(zone: string): Intl.DateTimeFormat {
  let formatter = formatters.get(zone);
  if (!formatter) {
    formatter = new Intl.DateTimeFormat('en-US', { timeZone: zone, timeZoneName: 'longOffset' });
    if (formatters.size > 1_000) formatters.clear();
    formatters.set(zone, formatter);
  }
  return formatter;
}

/**
 * Whether `zone` is an IANA zone name (`Europe/Prague`, `UTC`). Offsets such as `+02:00`, which newer
 * ICU versions accept as a time zone, are not names: refused, so a contact's zone follows daylight time.
 */
export function isTimeZone(zone: string): boolean {
  if (!/^[A-Za-z][A-Za-z0-9_+\-/]*$/.test(zone) || zone.length > 64) return false;
  try {
    offsetFormatter(zone);
    return true;
  } catch {
    return false;
  }
}

/**
 * The zone's name in ICU's spelling when the client's differs only in case (`europe/prague` →
 * `Europe/Prague`); otherwise as given. ICU's canonical name is not used as such: it renames current
 * zones to old ones (`Asia/Kolkata` → `Asia/Calcutta`, `Europe/Kyiv` → `Europe/Kiev`).
 */
export function timeZoneSpelling(zone: string): string {
  const resolved = offsetFormatter(zone).resolvedOptions().timeZone;
  return resolved.toLowerCase() === zone.toLowerCase() ? resolved : zone;
}

/** Minutes east of UTC in `zone` at `atMs` (spec §2.9 `timezoneUtcOffset`), daylight time included. */
export function utcOffsetMinutes(zone: string, atMs: number): number {
  const name = offsetFormatter(zone).formatToParts(atMs).find((part) => part.type === 'timeZoneName')?.value ?? 'GMT';
  const match = /^GMT([+-])(\d{2}):(\d{2})$/.exec(name);
  if (!match) return 0; // "GMT": UTC itself
  const minutes = Number(match[2]) * 60 + Number(match[3]);
  return match[1] === '-' ? -minutes : minutes;
}

/**
 * A contact's `timezoneUtcOffset` (spec §2.9): minutes east of UTC at `atMs`, or null for no zone, or one
 * this Node's ICU does not know (a database written under a newer one, a row written by hand).
 */
export function contactUtcOffset(zone: string | null, atMs: number): number | null {
  return zone && isTimeZone(zone) ? utcOffsetMinutes(zone, atMs) : null;
}

/**
 * The instant at which the clock in `zone` shows the wall time `wallMs` (a time read as if it were UTC):
 * Messenger's timezone scheduling sends at the same local hour everywhere. Around a daylight-time change
 * one rule on either side of UTC (Temporal's "compatible"): a time the clocks skip (02:30 in New York on
 * the spring-forward night) is read with the offset before the change, so it comes as late as the skip
 * (03:30 EDT), never early or on the day before; a time that happens twice (01:30 on the fall-back night)
 * is its first occurrence. The offsets a day either side are the candidates: zones change at most once
 * in two days.
 */
export function instantOfLocalTime(wallMs: number, zone: string): number {
  const day = 86_400_000;
  const before = wallMs - utcOffsetMinutes(zone, wallMs - day) * 60_000;
  const after = wallMs - utcOffsetMinutes(zone, wallMs + day) * 60_000;
  const shows = (instant: number) => instant + utcOffsetMinutes(zone, instant) * 60_000 === wallMs;
  if (shows(before) && shows(after)) return Math.min(before, after);
  if (shows(after)) return after;
  return before; // shows the wall time, or it falls in a skipped hour: the offset before the change
}
