import type { Db, Sqlite } from '../db/client.js';
import { RawResponse, type Routes } from '../http/router.js';
import type { Clock } from '../lib/clock.js';
import { AppError } from '../lib/errors.js';
import { createDeliveryRepo } from './repo.js';

/**
 * Capture mode (extension): `GET /v1/captured/:emailId` answers the complete signed message that would
 * have been sent, as `message/rfc822`, so CI pipelines can assert on exactly what leaves the machine.
 */
export function registerDeliveryRoutes(routes: Routes, deps: { db: Db; sqlite: Sqlite; clock: Clock }): void {
  const repo = createDeliveryRepo(deps.sqlite, deps.db, deps.clock);
  routes.get('/v1/captured/:emailId', (ctx) => {
    const captured = repo.findCaptured(ctx.project.id, ctx.params.emailId);
    if (!captured) throw new AppError('not-found', 'No captured message for this email (capture mode stores messages when delivery.mode = "capture").');
    return new RawResponse(captured.raw, {
      'content-type': 'message/rfc822',
      'x-postino-mail-from': captured.mailFrom,
      'x-postino-rcpt-to': captured.rcptTo,
    });
  });
}
