/**
 * The instant of an ISO 8601 / RFC 3339 date or date-time in ms, NaN when it is not one. Written as
 * Date.parse reads it: `T` (RFC 3339 §5.6 also allows `t` or a space, as Python's str(datetime) writes),
 * `Z` (or `z`), `±hh:mm` (or `±hhmm`, or ISO 8601's `±hh`). A date and time without an offset would be
 * read in the server's time zone (ECMAScript's rule): it is read as UTC, as a date alone already is, so
 * neither a send nor a search depends on the host's TZ.
 */
export function isoInstant(value: string): number {
  const match = /^(\d{4}-\d{2}-\d{2})(?:[Tt ]([\d:.]+)([Zz]|[+-]\d{2}(?::?\d{2})?)?)?$/.exec(value);
  if (!match) return Number.NaN;
  const [, date, time, offset] = match;
  if (time === undefined) return Date.parse(date);
  return Date.parse(`${date}T${time}${canonicalOffset(offset)}`);
}

/** `Z` for none or `z`; `±hh:mm` for `±hh` and `±hhmm`. */
function canonicalOffset(offset: string | undefined): string {
  if (offset === undefined || offset === 'z' || offset === 'Z') return 'Z';
  const digits = offset.slice(1).replace(':', '');
  return `${offset[0]}${digits.slice(0, 2)}:${digits.slice(2) || '00'}`;
}

/** Date.parse reads 2030-02-31 as 3 March; a day past the month's end is refused instead. */
export function isCalendarDate(value: string): boolean {
  const [year, month, day] = value.slice(0, 10).split('-').map(Number);
  return month >= 1 && month <= 12 && day >= 1 && day <= new Date(Date.UTC(year, month, 0)).getUTCDate();
}

/** An ISO 8601 date or date-time on the calendar (isoInstant, and no 31 February), in ms; NaN otherwise. */
export function calendarInstant(value: string): number {
  const at = isoInstant(value);
  return Number.isNaN(at) || !isCalendarDate(value) ? Number.NaN : at;
}
