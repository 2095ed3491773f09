/**
 * `text` cut to at most `maxUnits` UTF-16 units (JavaScript's string length) without cutting a
 * character in two: half of a surrogate pair (an emoji, a CJK extension character) is no character, and
 * JSON parsers of receivers refuse it (Rust's serde_json, PostgreSQL's jsonb) or fail to encode it again
 * (Python), so a webhook carrying one was answered 500 and retried for a day.
 */
export function cutToLength(text: string, maxUnits: number): string {
  if (text.length <= maxUnits) return text;
  const cut = text.slice(0, maxUnits);
  const last = cut.charCodeAt(cut.length - 1);
  return last >= 0xd800 && last <= 0xdbff ? cut.slice(0, -1) : cut;
}
