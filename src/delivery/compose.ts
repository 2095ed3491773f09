import MailComposer from 'nodemailer/lib/mail-composer';
import type { EmailRow } from './repo.js';

/**
 * Compose the MIME message from stored data only (never a user object passed through): MailComposer
 * with URL and file access disabled, so a stored `path`/`href` can never make the worker read a file or
 * fetch a URL.
 */
/** The stored email's fields that make up the message (the row type lives in repo.ts). */
export type ComposeInput = Pick<
  EmailRow,
  'toAddress' | 'fromAddress' | 'fromName' | 'replyToAddress' | 'replyToName' | 'subject' | 'html' | 'text' | 'headers' | 'messageId'
> & {
  emailId: string;
  attachments: ComposeAttachment[];
  date: Date;
};

export interface ComposeAttachment {
  name: string;
  contentType: string;
  content: Buffer;
  /** Content-ID of an inline image referenced as `cid:` from the html. */
  contentId?: string | null;
}

/** Headers the composer owns; a custom header of the same name must not produce a second copy. */
const reservedHeaders = new Set(['from', 'to', 'cc', 'bcc', 'subject', 'date', 'message-id', 'mime-version', 'content-type', 'content-transfer-encoding', 'return-path', 'dkim-signature', 'reply-to', 'sender']);

export async function composeMessage(input: ComposeInput): Promise<Buffer> {
  const composer = new MailComposer({
    from: input.fromName ? { name: input.fromName, address: input.fromAddress } : input.fromAddress,
    to: input.toAddress,
    replyTo: input.replyToAddress ? (input.replyToName ? { name: input.replyToName, address: input.replyToAddress } : input.replyToAddress) : undefined,
    subject: input.subject,
    date: input.date,
    messageId: input.messageId ?? defaultMessageId(input.emailId, input.fromAddress),
    text: input.text ?? undefined,
    html: input.html ?? undefined,
    headers: customHeaders(input.headers),
    attachments: input.attachments.map((a) => ({
      filename: a.name,
      contentType: a.contentType,
      content: a.content,
      cid: a.contentId ?? undefined,
    })),
    disableUrlAccess: true,
    disableFileAccess: true,
    xMailer: false,
  });
  return composer.compile().build();
}

/** `<emailId@sending-domain>`: unique, and on the sender's own domain as Gmail expects. */
export function defaultMessageId(emailId: string, fromAddress: string): string {
  return `<${emailId}@${domainOf(fromAddress)}>`;
}

export function domainOf(address: string): string {
  const at = address.lastIndexOf('@');
  return (at < 0 ? address : address.slice(at + 1)).toLowerCase();
}

function customHeaders(headers: Record<string, string> | null): Record<string, string> | undefined {
  if (!headers) return undefined;
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    // Header injection guard: names are tokens, values are single lines.
    if (!/^[!-9;-~]+$/.test(name) || reservedHeaders.has(name.toLowerCase())) continue;
    out[name] = String(value).replace(/[\r\n]+/g, ' ');
  }
  return out;
}
