import type { AcceptArgs } from '../../src/emails/accept-procedure.js';
import type { Clock } from '../../src/lib/clock.js';
import { newId } from '../../src/lib/ids.js';

/** The write procedure's input for one queued text email with a small attachment (emails.accept). */
export function acceptArgs(clock: Clock, projectId: string, toAddress: string): AcceptArgs {
  const id = newId(clock);
  return {
    projectId,
    nowMs: clock.nowMs(),
    batch: false,
    emails: [
      {
        eventId: newId(clock),
        attachments: [{ id: newId(clock), emailId: id, name: 'a.txt', contentType: 'text/plain', size: 2, content: Buffer.from('hi'), contentId: null }],
        email: {
          id, projectId, status: 'queued', toAddress, fromAddress: 'app@sender.test', fromName: null, replyToAddress: null, replyToName: null,
          subject: 'Hi', templateId: null, templateName: null, templateProps: null, automationId: null, messengerId: null, contentKind: 'text',
          html: null, text: 'Hello', headers: null, isOpenTracked: 0, scheduledAt: null, createdAt: clock.nowMs(),
        },
      },
    ],
  };
}
