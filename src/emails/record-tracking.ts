import type { Db } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import { newId } from '../lib/ids.js';
import { recordWebhookEvent } from '../webhooks/outbox.js';
import type { EmailsRepo } from './repo.js';
import { cutToLength } from '../lib/text.js';

export interface TrackingEvent {
  emailId: string;
  type: 'open' | 'click';
  ip: string | undefined;
  userAgent: string | undefined;
  url?: string;
}

/** Opens (and clicks) stored per email; later ones still count for the status, not as rows. */
export const maxTrackingEventsPerType = 100;

/**
 * The statuses whose first open sends `email.open`. Not `queued` (the delivered outcome sends it,
 * later), nor an email that bounced or was never sent: webhooks.md says none if it bounces, as
 * applyEarlierReports decides for an open that came before the bounce; one after it is the same
 * open (a scanner, or the pixel of a copy whose final hop failed). The event is still recorded.
 */
const opensNotified: ReadonlySet<string> = new Set(['delivered', 'open', 'complaint']);

/**
 * One transaction: the event (time, IP, user agent), `delivered` → `open`, and on the FIRST open only
 * the `email.open` webhook outbox row (COMPAT.md "Webhooks"). An email still queued was opened from a
 * copy sent without an answer: its webhook waits for the delivered outcome, which sends it after
 * email.delivered (delivery/repo.ts applyEarlierReports), so receivers see them in that order.
 */
export function recordTrackingEvent(db: Db, repo: EmailsRepo, clock: Clock, event: TrackingEvent): void {
  const row = repo.findEmailForTracking(event.emailId);
  if (!row) return;
  // A click implies an open: a reader whose client blocks remote images (the pixel never loads) opened
  // the email to click its link. The first click with no open recorded counts as the open too, unless
  // the sender asked for no open tracking (isOpenTracked false).
  if (event.type === 'click' && row.is_open_tracked === 1 && !repo.hasEvent(row.id, 'open')) recordOne(db, repo, clock, row, { ...event, type: 'open', url: undefined });
  recordOne(db, repo, clock, row, event);
}

function recordOne(db: Db, repo: EmailsRepo, clock: Clock, row: TrackedEmail, event: TrackingEvent): void {
  const now = clock.nowMs();
  const firstOpen = event.type === 'open' && opensNotified.has(row.status) && !repo.hasEvent(row.id, 'open');
  if (event.type === 'open') repo.setStatusFrom(row.id, 'delivered', 'open', now);
  // The pixel and the click links are public: a loop fetching one must not grow the email's record
  // (GET /v1/email/{id} returns every event) without bound. Past the cap an event is not stored.
  if (repo.countEventsUpTo(row.id, event.type, maxTrackingEventsPerType) >= maxTrackingEventsPerType) return;
  const data = event.url ? JSON.stringify({ url: event.url }) : null;
  repo.insertEvent(newId(clock), row.id, event.type, now, event.ip ?? null, truncate(event.userAgent), data);
  if (firstOpen) {
    recordWebhookEvent(db, clock, {
      projectId: row.project_id,
      type: 'email.open',
      data: { id: row.id, emailId: row.id, time: new Date(now).toISOString(), ipAddress: event.ip ?? null, userAgent: truncate(event.userAgent) },
    });
  }
}

type TrackedEmail = NonNullable<ReturnType<EmailsRepo['findEmailForTracking']>>;

function truncate(value: string | undefined): string | null {
  return value === undefined ? null : cutToLength(value, 512);
}
