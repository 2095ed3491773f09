import { and, eq } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { emailEvents, emails, type EmailStatus } from '../db/schema/emails.js';
import type { Clock } from '../lib/clock.js';
import { newId } from '../lib/ids.js';

/** Synchronous queries of the bounces feature (DESIGN convention 6); writers run inside one transaction. */
export type BouncedEmail = NonNullable<ReturnType<ReturnType<typeof createBouncesRepo>['findEmail']>>;

export function createBouncesRepo(db: Db, clock: Clock) {
  return {
    findEmail(emailId: string) {
      return db
        .select({
          id: emails.id,
          projectId: emails.projectId,
          status: emails.status,
          toAddress: emails.toAddress,
          fromAddress: emails.fromAddress,
          subject: emails.subject,
          messageId: emails.messageId,
          templateId: emails.templateId,
          templateName: emails.templateName,
        })
        .from(emails)
        .where(eq(emails.id, emailId))
        .get();
    },

    appendEvent(emailId: string, type: string, data: Record<string, unknown>): void {
      db.insert(emailEvents).values({ id: newId(clock), emailId, type, time: clock.nowMs(), data }).run();
    },

    /** Compare-and-set, so a concurrent change (an open, the worker) is never overwritten blindly. */
    setStatusFrom(emailId: string, from: EmailStatus, to: EmailStatus): boolean {
      const result = db
        .update(emails)
        .set({ status: to, updatedAt: clock.nowMs() })
        .where(and(eq(emails.id, emailId), eq(emails.status, from)))
        .run();
      return result.changes > 0;
    },
  };
}
