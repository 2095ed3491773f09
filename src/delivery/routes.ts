import type { Db, Sqlite } from '../db/client.js';
import { RawResponse, type Routes } from '../http/router.js';
import type { Clock } from '../lib/clock.js';
import { AppError } from '../lib/errors.js';
import { formatDuration, type Config } from '../config/schema.js';
import { createDeliveryRepo } from './repo.js';

type DeliveryMode = Config['delivery']['mode'];

/** Why GET /v1/captured finds no message: the email's status, and whether it was captured at all. */
interface CaptureState {
  status: string | undefined;
  wasCaptured: boolean;
}

/**
 * Capture mode (extension): `GET /v1/captured/:emailId` answers the complete signed message that would
 * have been sent, as `message/rfc822`, so CI pipelines can assert on exactly what leaves the machine.
 */
export function registerDeliveryRoutes(routes: Routes, deps: { db: Db; sqlite: Sqlite; clock: Clock; mode: DeliveryMode; captureRetentionMs: number }): void {
  const repo = createDeliveryRepo(deps.sqlite, deps.db, deps.clock);
  routes.get('/v1/captured/:emailId', (ctx) => {
    const captured = repo.findCaptured(ctx.project.id, ctx.params.emailId);
    if (!captured) {
      const status = repo.emailStatus(ctx.project.id, ctx.params.emailId);
      const state = { status, wasCaptured: status !== undefined && repo.wasCaptured(ctx.params.emailId) };
      throw new AppError('not-found', whyNotCaptured(deps.mode, deps.captureRetentionMs, state));
    }
    return new RawResponse(captured.raw, {
      'content-type': 'message/rfc822',
      'x-postino-mail-from': captured.mailFrom,
      'x-postino-rcpt-to': captured.rcptTo,
    });
  });
}

/**
 * A CI job reads the message right after its send was answered, and capture runs a moment later (the
 * worker claims queued mail in batches): the answer says to ask again rather than blame the config.
 */
function whyNotCaptured(mode: DeliveryMode, retentionMs: number, { status, wasCaptured }: CaptureState): string {
  if (status === undefined) return 'No email with this id in this project.';
  // Its capture is recorded on the email: the retention deleted it (whatever the mode is now), which
  // the answer says rather than list every way an email can lack one.
  if (wasCaptured) {
    const kept = retentionMs > 0 ? ` (${formatDuration(retentionMs)})` : ' (0s now: kept forever from here on)';
    return `The captured message was deleted: captured messages are kept for delivery.capture_retention${kept} after capture. The email record stays (status ${status}).`;
  }
  if (mode !== 'capture') return `Nothing is captured: delivery.mode is "${mode}" (capture mode stores each message instead of sending it when delivery.mode = "capture").`;
  if (status === 'queued' || status === 'scheduled') return `Not captured yet: the email is ${status}. Capture follows within moments of the send (a scheduled email within ~5 s after its scheduledAt, when the scheduler releases it); ask again.`;
  return `No captured message for this email (status ${status}): it was not sent, or went out while delivery.mode was not "capture".`;
}
