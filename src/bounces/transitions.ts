import type { EmailStatus } from '../db/schema/emails.js';

/**
 * Which email statuses an asynchronous report may overrule (pure rule table).
 * - bounce: a message the MX accepted can still bounce later (forwarding, quota, a backend store), so
 *   `delivered` → `bounce`, and `open` too (pixels are fetched by scanners before the final hop fails).
 *   `queued` stays with the delivery worker, which owns queued emails; the event is still recorded.
 * - complaint: the strongest reputation signal; it outranks delivered, open and an earlier bounce.
 * Any other status (already there, error, suppressed, never sent) keeps its value: event only.
 */
const rules: Record<'bounce' | 'complaint', ReadonlySet<EmailStatus>> = {
  bounce: new Set<EmailStatus>(['delivered', 'open']),
  complaint: new Set<EmailStatus>(['delivered', 'open', 'bounce']),
};

export function nextStatus(current: EmailStatus, outcome: 'bounce' | 'complaint'): EmailStatus | undefined {
  return rules[outcome].has(current) ? outcome : undefined;
}
