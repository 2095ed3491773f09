import type { AddressObject, Attachment, EmailAddress, ParsedMail } from 'mailparser';
import { isValidAddress, withAsciiDomain } from '../emails/address.js';
import type { HeaderAddress, HeaderRecipients } from '../emails/header-recipients.js';
import { limits, type SendEmailInput } from '../emails/schemas.js';
import { defaultAttachmentName, isAttachedMessage, type AttachedMessage } from '../emails/attachments.js';
import { cannotBeEncoded, headerProblem } from '../emails/headers.js';
import { AppError } from '../lib/errors.js';
import { jsonValueProblem } from '../lib/json-limits.js';
import type { InlineImage } from '../render/types.js';
import { decodeAsciiWords, decodeWords } from './decode-words.js';
import { headerValue } from './parse-message.js';
import { cutToLength } from '../lib/text.js';

/** Control headers an app sets to use API features over SMTP; `X-Sidemail-*` are what existing users send. */
const controls = {
  template: ['x-postino-template', 'x-sidemail-template'],
  templateProps: ['x-postino-template-props', 'x-sidemail-template-props'],
  scheduledAt: ['x-postino-scheduled-at', 'x-sidemail-scheduled-at'],
  markdown: ['x-postino-markdown', 'x-sidemail-markdown'],
  openTracking: ['x-postino-open-tracking', 'x-sidemail-open-tracking'],
} as const;

/** Headers carried over to the sent email besides X-* ones (threading and one-click unsubscribe). */
const passThrough = new Set(['list-unsubscribe', 'list-unsubscribe-post', 'in-reply-to', 'references']);

/**
 * Maps one submitted message to one send input per envelope recipient (RCPT TO, so Bcc works), the
 * message's To/Cc lists every copy shows (`headerRecipients`; none when it names nobody there), and the
 * emails it forwards (`attachedMessages`). Content precedence: template header → markdown header (the
 * text part is markdown) → the html and text parts. Throws `parameters-invalid` for malformed control
 * headers; everything else is validated by the send API's own schema, so SMTP and HTTP accept the same
 * emails, but for a forwarded email, which only SMTP can carry (attachedMessages).
 */
export function buildSendInputs(
  parsed: ParsedMail,
  envelope: { mailFrom: string; rcptTo: string[] },
): { inputs: SendEmailInput[]; inlineImages: InlineImage[]; attachedMessages: AttachedMessage[]; headerRecipients: HeaderRecipients | undefined } {
  const from = firstAddress(parsed.from);
  const replyTo = firstAddress(parsed.replyTo);
  const base: SendEmailInput = {
    toAddress: '',
    fromAddress: from?.address || envelope.mailFrom,
    ...(from?.name && { fromName: from.name }),
    ...(replyTo?.address && { replyToAddress: replyTo.address }),
    ...(replyTo?.name && { replyToName: replyTo.name }),
    ...subjectOf(parsed),
    ...content(parsed),
  };
  const scheduledAt = control(parsed, controls.scheduledAt);
  // An empty one is a mistake to hear of, not "now": the app meant a time.
  if (scheduledAt !== undefined && !scheduledAt.value) throw new AppError('parameters-invalid', `${scheduledAt.name}: is empty; give an ISO 8601 date, or leave the header out to send now.`);
  if (scheduledAt) base.scheduledAt = scheduledAt.value;
  const tracking = control(parsed, controls.openTracking);
  if (tracking !== undefined) base.isOpenTracked = parseBoolean(tracking);
  const headers = customHeaders(parsed);
  if (Object.keys(headers).length > 0) base.headers = headers;
  // A forwarded email (a message/rfc822 part, kept whole by the parser: submission.ts) stays an attached
  // message with its bytes as sent. The send API's extension allow-list (spec §4.2: files typed by their
  // name, for JSON clients) has no .eml, and applied here it refused every forward with 554; over SMTP the
  // part says its own type, and it is the operator's own authenticated app that forwards its mail, as any
  // MTA would relay it.
  const messageParts = (parsed.attachments ?? []).filter(isAttachedMessage);
  const parts = (parsed.attachments ?? []).filter((part) => !isAttachedMessage(part));
  const isHtmlResource = htmlResourceTest(parsed.html);
  const attachments = parts.filter((a) => !isHtmlResource(a));
  if (attachments.length > 0) base.attachments = attachments.map((a) => ({ name: a.filename || defaultAttachmentName(a.contentType), content: a.content.toString('base64') }));
  const inlineImages = inlineImagesOf(parts.filter(isHtmlResource));
  const attachedMessages = messageParts.map((part) => ({ name: attachedMessageName(part.filename), content: part.content }));
  assertAttachmentsFit([...attachments, ...inlineImages, ...attachedMessages].map((part) => part.content.length));
  return { inputs: envelope.rcptTo.map((toAddress) => ({ ...base, toAddress })), inlineImages, attachedMessages, headerRecipients: headerRecipientsOf(parsed) };
}

/** RFC 5321 §4.5.3.1.8's 100 recipients: what a message names in To and Cc is stored with every copy. */
export const maxHeaderRecipients = 100;

/**
 * The message's To and Cc lists as every copy shows them (emails/header-recipients.ts), and its Reply-To
 * list when it names several addresses. A group's members are listed as mailboxes (an empty group,
 * `undisclosed-recipients:;`, names nobody); an entry that is not an address the send API would take
 * is left out, so the header stays ASCII as the delivery (no SMTPUTF8) needs it; past
 * `maxHeaderRecipients`, the rest are left out.
 */
function headerRecipientsOf(parsed: ParsedMail): HeaderRecipients | undefined {
  let room = maxHeaderRecipients;
  const listed = (value: AddressObject | AddressObject[] | undefined): HeaderAddress[] => {
    const out: HeaderAddress[] = [];
    for (const entry of mailboxesOf(value)) {
      if (room === 0) break;
      out.push(entry);
      room--;
    }
    return out;
  };
  const to = listed(parsed.to);
  const cc = listed(parsed.cc);
  const replyTo = listed(parsed.replyTo);
  // Kept only when it holds more than the record's one replyToAddress says.
  const replyToList = replyTo.length > 1 ? { replyTo } : {};
  return to.length + cc.length > 0 || replyTo.length > 1 ? { to, cc, ...replyToList } : undefined;
}

function* mailboxesOf(value: AddressObject | AddressObject[] | undefined): Generator<HeaderAddress> {
  const headers = Array.isArray(value) ? value : value ? [value] : [];
  for (const header of headers) yield* flattened(header.value);
}

/**
 * A display name cut to the send API's name limit (UTF-16 units, as its schema counts) without cutting a
 * character in two: half of an emoji's surrogate pair is no character and went out as U+FFFD.
 */
function shortenedName(name: string): string {
  return cutToLength(name, limits.name - 1);
}

function* flattened(entries: EmailAddress[]): Generator<HeaderAddress> {
  for (const entry of entries) {
    if (entry.group) yield* flattened(entry.group);
    else {
      const address = entry.address && withAsciiDomain(entry.address);
      if (address && isValidAddress(address)) yield { name: shortenedName(entry.name ?? ''), address };
    }
  }
}

/**
 * A part of a multipart/related html (RFC 2387), or a part elsewhere whose Content-ID the html links as
 * `cid:` (RFC 2392): the html's own resource unless it says it is an attachment. Python's classic
 * `MIMEImage` + `Content-ID` recipe and JavaMail write no Content-Disposition at all; Django's
 * `attach(MIMEImage)` puts the image in the multipart/mixed, next to the alternative, where mail
 * clients still resolve the link. Read as an attachment, such an image went out as `attachment.png`
 * without its Content-ID, and the html's `cid:` link pointed at nothing.
 */
function htmlResourceTest(html: string | false | undefined): (part: Attachment) => boolean {
  const linked = linkedContentIds(typeof html === 'string' ? html : '');
  return (part) => part.contentDisposition !== 'attachment' && (part.related === true || (part.cid !== undefined && linked.has(part.cid)));
}

/** The Content-IDs an html links as `cid:` (URL-encoded, RFC 2392 §2), read as the send pipeline reads them (emails/service.ts). */
function linkedContentIds(html: string): Set<string> {
  const ids = new Set<string>();
  for (const [, reference] of html.matchAll(/cid:([^"'\s()<>]+)/gi)) {
    ids.add(reference);
    try {
      ids.add(decodeURIComponent(reference));
    } catch {
      // not URL-encoded: kept as it is
    }
  }
  return ids;
}

/**
 * The images of a multipart/related html (`<img src="cid:…">`: logos, signatures), kept as inline parts
 * with their Content-ID. Other inline parts of the html (fonts, stylesheets) are not kept.
 */
function inlineImagesOf(parts: Attachment[]): InlineImage[] {
  return parts
    .filter((part) => part.cid && inlineImageTypes.has(part.contentType.toLowerCase()))
    .map((part, i) => ({
      cid: part.cid!,
      contentType: part.contentType.toLowerCase(),
      content: part.content,
      // The send API's limit on attachment names.
      filename: (part.filename || defaultAttachmentName(part.contentType, `image-${i + 1}`)).slice(0, limits.attachmentName - 1),
    }));
}

const inlineImageTypes = new Set(['image/png', 'image/jpeg', 'image/gif']);

/** The part's file name (mail clients name it after the forwarded subject), within the send API's name limit; one for a part without. */
function attachedMessageName(filename: string | undefined): string {
  const name = filename?.trim() || 'forwarded-message.eml';
  if (name.length < limits.attachmentName) return name;
  // Cut before the extension, so a long subject still ends in .eml.
  const extension = /\.[A-Za-z0-9]{1,10}$/.exec(name)?.[0] ?? '';
  return `${cutToLength(name, limits.attachmentName - 1 - extension.length)}${extension}`;
}

/**
 * The send API's attachment limit, checked here to answer it as what it is over SMTP: a message too
 * large (552 5.3.4), not a malformed one. The send schema checks the same limit for HTTP.
 */
function assertAttachmentsFit(byteSizes: number[]): void {
  // Counted as the send API counts them: characters of Base64, 4 for every 3 bytes begun.
  const total = byteSizes.reduce((sum, bytes) => sum + 4 * Math.ceil(bytes / 3), 0);
  if (total < limits.attachmentsTotal) return;
  const maxMb = ((limits.attachmentsTotal * 3) / 4 / 1_048_576).toFixed(1);
  throw new AppError('payload-too-large', `Attachments too large: at most ${maxMb} MB of files in all (${limits.attachmentsTotal} characters of Base64).`);
}

/**
 * The message's Subject. mailparser leaves out a blank one (`Subject: `, what PHP's mail() and Python's
 * `msg['Subject'] = ''` write for an empty subject), which made the API's "subject is required" refuse a
 * message that says its subject is empty: it is `subject: ""`, as the send API takes it. A message with
 * no Subject field at all still gets that refusal (the send API's own rule for an omitted subject).
 */
function subjectOf(parsed: ParsedMail): Pick<SendEmailInput, 'subject'> {
  if (parsed.subject !== undefined) return { subject: parsed.subject };
  return parsed.headerLines.some((line) => line.key === 'subject') ? { subject: '' } : {};
}

function content(parsed: ParsedMail): Partial<SendEmailInput> {
  // Props fill {variables} of a template and of markdown alike, as in the HTTP send (html and text have
  // none). Read whatever the content: props that do not parse are a mistake to hear of with html or text
  // too, where they were dropped with 250.
  const props = control(parsed, controls.templateProps);
  const templateProps = props !== undefined ? { templateProps: parseProps(props) } : {};
  const template = control(parsed, controls.template)?.value;
  if (template) return { ...(/^[0-9a-f]{24}$/.test(template) ? { templateId: template } : { templateName: template }), ...templateProps };
  const markdown = control(parsed, controls.markdown);
  if (markdown !== undefined && parseBoolean(markdown)) {
    // An html-only message (its html is not the markdown) went out as an empty branded email, with 250.
    if (!parsed.text?.trim()) throw new AppError('parameters-invalid', `${markdown.name}: true takes the markdown from the text part, and the message has no text part.`);
    return { markdown: parsed.text, ...templateProps };
  }
  return {
    ...(typeof parsed.html === 'string' && parsed.html.length > 0 && { html: parsed.html }),
    // mailparser gives an html-only message an empty text: no text part, as the API stores html alone.
    ...(parsed.text && { text: parsed.text }),
  };
}

/** A control header's value, and its name as the message wrote it (for the error that names it). */
interface ControlHeader {
  name: string;
  value: string;
}

function control(parsed: ParsedMail, names: readonly string[]): ControlHeader | undefined {
  for (const name of names) {
    const line = parsed.headerLines.find((h) => h.key === name);
    if (line) return { name: line.line.slice(0, line.line.indexOf(':')).trim(), value: decodeWords(headerValue(line.line)).trim() };
  }
  return undefined;
}

function customHeaders(parsed: ParsedMail): Record<string, string> {
  const out: Record<string, string> = {};
  // The name each field was kept under, by its lower-case key: a scan of `out` per header made a
  // 250 kB message of 20,000 X- headers hold the event loop for 22 s (quadratic in the count).
  const keptName = new Map<string, string>();
  for (const { key, line } of parsed.headerLines) {
    const isControl = key.startsWith('x-postino-') || key.startsWith('x-sidemail-');
    if (isControl || !(key.startsWith('x-') || passThrough.has(key))) continue;
    const name = line.slice(0, line.indexOf(':')).trim();
    let value = fieldValue(key, line);
    if (key === 'references') value = trimmedReferences(value);
    // Mail clients add odd X- headers; drop what the send API would refuse rather than reject the mail.
    if (headerProblem(name, value)) continue;
    const earlier = keptName.get(key);
    if (earlier !== undefined && key === 'list-unsubscribe') {
      // When both do not fit in one field, the first stays (nodemailer writes the https URI first).
      const merged = joinedUriList(out[earlier], value);
      if (!headerProblem(earlier, merged)) out[earlier] = merged;
      continue;
    }
    // A field given twice (in any case) keeps its last instance, as the API takes one per name.
    if (earlier !== undefined) delete out[earlier];
    keptName.set(key, name);
    out[name] = value;
  }
  return out;
}

/**
 * The unfolded value, its encoded-words decoded. In the fields that must stay ASCII (URIs, message ids:
 * emails/headers.ts cannotBeEncoded) only those that decode to ASCII are: nodemailer writes a non-ASCII
 * `list.unsubscribe` comment as an encoded-word (RFC 2047 §5 allows one in a comment), and decoded it
 * made the value non-ASCII, so the send API's rule dropped the whole List-Unsubscribe.
 */
function fieldValue(key: string, line: string): string {
  const value = headerValue(line);
  return (cannotBeEncoded(key) ? decodeAsciiWords(value) : decodeWords(value)).trim();
}

/**
 * RFC 2369 §2: a List-Unsubscribe field is a comma-separated list of URIs. nodemailer's `list.unsubscribe`
 * with several entries writes one field per URI (the https one first, then a mailto:); keeping only the
 * last sent the mailto: alone, and a List-Unsubscribe-Post then had no https URI to POST to (RFC 8058
 * §3.1), so Gmail and Yahoo offered no one-click unsubscribe. The fields become one list, in their order.
 */
function joinedUriList(first: string, next: string): string {
  return `${first}, ${next}`;
}

/**
 * A long thread's References (folded over many lines) can pass the 998 characters a custom header may
 * have, and was dropped whole. RFC 5322 §3.6.4 lets it be shortened: the first id (the thread's start)
 * and as many of the latest as fit.
 */
export function trimmedReferences(value: string, max = 998): string {
  if (value.length <= max) return value;
  const [first, ...rest] = value.match(/<[^<>]*>/g) ?? [];
  if (first === undefined || rest.length === 0) return value;
  const kept: string[] = [];
  let length = first.length;
  for (const id of rest.reverse()) {
    if (length + 1 + id.length > max) break;
    kept.unshift(id);
    length += 1 + id.length;
  }
  return [first, ...kept].join(' ');
}

function parseProps(header: ControlHeader): Record<string, any> {
  let value: unknown;
  try {
    value = JSON.parse(header.value);
  } catch {
    // reported below
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new AppError('parameters-invalid', `${header.name} must be a JSON object.`);
  // The API body's limits (lib/json-limits.ts): nested thousands deep, the props overflowed the stack
  // when stored and the message was answered 451, so its client retried it for days; a lone surrogate
  // was stored, and given back as an escape strict JSON parsers refuse.
  const problem = jsonValueProblem(value);
  if (problem) throw new AppError('parameters-invalid', `${header.name} ${problem}.`);
  return value as Record<string, any>;
}

function parseBoolean(header: ControlHeader): boolean {
  const value = header.value.toLowerCase();
  if (['true', 'yes', '1', 'on'].includes(value)) return true;
  if (['false', 'no', '0', 'off'].includes(value)) return false;
  throw new AppError('parameters-invalid', `${header.name} must be true or false.`);
}

function firstAddress(value: AddressObject | AddressObject[] | undefined): { address?: string; name?: string } | undefined {
  const list = Array.isArray(value) ? value : value ? [value] : [];
  for (const group of list) for (const entry of group.value) if (entry.address) return { address: withAsciiDomain(entry.address), name: entry.name || undefined };
  return undefined;
}
