/** Spec §4.2: allowed extensions and the content type each one implies. */
const contentTypes: Record<string, string> = {
  jpg: 'image/jpeg',
  pdf: 'application/pdf',
  csv: 'text/csv',
  html: 'text/html',
  png: 'image/png',
  gif: 'image/gif',
  json: 'application/json',
  txt: 'text/plain',
};

/**
 * An email attached whole to a submitted message (RFC 2046 §5.2.1 message/rfc822: a forwarded email),
 * stored and sent as that type. Only SMTP submission makes one: the send API's attachments are the
 * spec's files, typed by their extension above.
 */
export interface AttachedMessage {
  name: string;
  content: Buffer;
}

export const attachedMessageType = 'message/rfc822';

/** Whether a part or stored attachment of `contentType` is an attached message (a forwarded email). */
export const isAttachedMessage = (attachment: { contentType: string }): boolean => attachment.contentType.toLowerCase() === attachedMessageType;

/** Content type for an attachment name, or undefined when the name is not `<1+ chars>.<allowed ext>`. */
export function attachmentContentType(name: string): string | undefined {
  const match = /^.+\.([A-Za-z]+)$/s.exec(name);
  return match ? contentTypes[match[1].toLowerCase()] : undefined;
}

/**
 * A name for an attachment that came without one (a MIME part without filename, over SMTP submission):
 * `<stem>.<ext>` for an allowed content type, so it passes the send API's name rule; the stem alone
 * otherwise, which that rule then refuses by its type.
 */
export function defaultAttachmentName(contentType: string | undefined, stem = 'attachment'): string {
  const type = contentType?.split(';')[0].trim().toLowerCase();
  const extension = Object.keys(contentTypes).find((ext) => contentTypes[ext] === type);
  return extension ? `${stem}.${extension}` : stem;
}

// RFC 4648 §4: the standard alphabet, padded to a multiple of 4, no whitespace or line breaks. Checked
// as the alphabet, a length and at most two `=` at the end: a pattern repeating a group of 4 ran out of
// stack on a few MB of content (a 500 where an oversized attachment deserves its 400).
const base64Alphabet = /^[A-Za-z0-9+/]*={0,2}$/;

export function isBase64(value: string): boolean {
  return value.length % 4 === 0 && base64Alphabet.test(value);
}
