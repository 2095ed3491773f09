/*
 * Compose the MIME message from stored data only (never a user object passed through): MailComposer
 * with URL and file access disabled, so a stored `path`/`href` can never make the worker read a file or
 * fetch a URL.
 */

import { randomBytes } from 'node:crypto';
import MailComposer from 'nodemailer/lib/mail-composer';
import MimeNode from 'nodemailer/lib/mime-node';
import { encode as base64Encode, wrap as base64Wrap } from 'nodemailer/lib/base64';
import { buildHeaderValue, encodeWord, foldLines, hasLongerLines, isPlainText, parseHeaderValue } from 'nodemailer/lib/mime-funcs';
import { encode as qpEncode, wrap as qpWrap } from 'nodemailer/lib/qp';
import { domainOf } from '../emails/address.js';
import { isAttachedMessage } from '../emails/attachments.js';
import type { HeaderRecipients } from '../emails/header-recipients.js';
import { exactQuotedPrintable, textAttachmentPart, textEncodingOf } from './transfer-encoding.js';
import type { DeliverableEmail } from './repo.js';

/** The stored email's fields that make up the message (the row type lives in repo.ts). */
export type ComposeInput = Pick<
  DeliverableEmail,
  'toAddress' | 'fromAddress' | 'fromName' | 'replyToAddress' | 'replyToName' | 'subject' | 'html' | 'text' | 'headers' | 'messageId'
> & {
  /** A submitted message's own To/Cc lists, written instead of `To: toAddress` (absent: the recipient alone). */
  headerRecipients?: HeaderRecipients | null;
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

/**
 * The MIME message of a stored email, built synchronously, byte for byte what MailComposer's build()
 * writes for the same input, boundary and date (test/delivery/compose.test.ts compares them over every
 * shape and a generated corpus), but for an empty subject, written as an empty field (emptySubjectField),
 * an ASCII subject with a quote, written as it is (isWrittenAsIs), and a quoted-printable text attachment,
 * encoded so that it decodes to the bytes that were sent, a lone LF or CR included (encodeContent).
 *
 * An email with attachments, custom headers or a submitted message's To/Cc lists goes through
 * MailComposer's tree (`composeWithMailComposer`).
 * The rest, nearly all transactional mail, is written directly (`composeDirect`) with the encoders
 * MailComposer's nodes use: building and walking the tree cost ~0.1 ms per message on this machine,
 * a third of the RSA signature, and under the delivery load more than that (docs/benchmarks.md).
 */
export function composeMessage(input: ComposeInput, baseBoundary = nextBaseBoundary()): Buffer {
  const parts = bodyParts(input);
  const direct = parts.length > 0 && input.attachments.length === 0 && !input.headerRecipients && Object.keys(customHeaders(input.headers) ?? {}).length === 0;
  const message = direct ? composeDirect(input, parts, baseBoundary) : composeWithMailComposer(input, baseBoundary);
  // MimeNode's LastNewline stage: the message always ends with a line break.
  const last = message[message.length - 1];
  if (last === 0x0a) return withCrlfLineBreaks(message);
  return withCrlfLineBreaks(Buffer.concat([message, Buffer.from(last === 0x0d ? '\n' : '\r\n')]));
}

/**
 * Every line break as CRLF (RFC 5322 §2.3). MailComposer keeps the line breaks of the content it is
 * given (a text of `line1\nline2` stays so), and smtp-connection turns a bare LF or CR into CRLF on the
 * wire. The DKIM body hash must be computed over the bytes the receiver gets, so the message is made of
 * CRLF lines before it is signed (or captured).
 */
export function withCrlfLineBreaks(message: Buffer): Buffer {
  const text = message.toString('latin1');
  if (!/\r(?!\n)|(?<!\r)\n/.test(text)) return message;
  return Buffer.from(text.replace(/\r\n|\r|\n/g, '\r\n'), 'latin1');
}

/**
 * MailComposer builds the tree (structure, every header, encodings); only the serialisation differs: its
 * own build() streams each node through Transform streams with an AbortController per pipeline (~0.45 ms
 * per message here); `serializeNode` writes the same bytes in one pass with the same encoders.
 */
function composeWithMailComposer(input: ComposeInput, baseBoundary: string): Buffer {
  const root = new MailComposer(mailOptions(input, baseBoundary)).compile() as unknown as MimeTreeNode;
  const chunks: Buffer[] = [];
  serializeNode(root, chunks);
  // Asked of what MailComposer wrote, not of trim(): a subject of U+00A0 or U+3000 alone is written
  // (encoded), though trim() takes it for blank, and a second, empty field went out beside it.
  if (!/^Subject:/im.test(chunks[0]!.toString('latin1'))) chunks[0] = withEmptySubjectField(chunks[0]!);
  else if (isWrittenAsIs(input.subject)) chunks[0] = withFieldReplaced(chunks[0]!, 'Subject', subjectAsIsField(input.subject));
  const references = givenReferences(input.headers);
  if (references) chunks[0] = withFieldReplaced(chunks[0]!, 'References', foldLines(`References: ${references}`, 76));
  return Buffer.concat(chunks);
}

/**
 * A subject of printable ASCII holding a `"` goes out as it is: MailComposer encodes every value with a
 * quote (a rule for display names, where a quote has a meaning), but in the unstructured Subject it is an
 * ordinary character (RFC 5322 §3.2.5), and filters score an ASCII subject sent as encoded-words (rspamd
 * SUBJ_EXCESS_QP, 1.2 points: `Your order "Blue Shirt" has shipped`).
 */
function isWrittenAsIs(subject: string): boolean {
  return subject.includes('"') && /^[\x20-\x7e\t]*$/.test(subject) && subjectOf(subject) === subject;
}

const subjectAsIsField = (subject: string) => foldLines(`Subject: ${subject}`, 76);

/** The root's header block with MailComposer's `name` field (and its folded lines) replaced by `field`. */
function withFieldReplaced(rootHeaders: Buffer, name: 'Subject' | 'References', field: string): Buffer {
  return Buffer.from(rootHeaders.toString('latin1').replace(new RegExp(`^${name}: .*(?:\\r\\n[ \\t].*)*`, 'm'), () => field), 'latin1');
}

/**
 * A custom References value, which goes out as given (the send API takes printable ASCII there): MailComposer
 * rewrites it word by word into `<…>`, and `<a@x>, <b@x>` (the obsolete comma list, RFC 5322 §4.5.4) went
 * out as `<a@x>,> <b@x>`, which no client threads by, unlike what the email's record says was sent.
 */
function givenReferences(headers: Record<string, string> | null): string | undefined {
  const entry = Object.entries(headers ?? {}).find(([name]) => name.toLowerCase() === 'references');
  const value = entry?.[1].replace(/[\r\n]+/g, ' ');
  return value && value.trim() && /^[\x20-\x7e\t]*$/.test(value) ? value : undefined;
}

/**
 * RFC 5322 §3.6.5 lets a Subject be empty, and mail clients write an email whose subject was left blank
 * with an empty `Subject:` field. MailComposer leaves a blank field out instead, and filters score a
 * message without any Subject (rspamd MISSING_SUBJECT, 2 points; SpamAssassin MISSING_SUBJECT) higher
 * than one whose subject is empty (rspamd EMPTY_SUBJECT, 1 point).
 */
const emptySubjectField = 'Subject: ';

/** The root's header block (chunks[0] of serializeNode) with the empty Subject field, where compile() puts a Subject: before Message-ID. */
function withEmptySubjectField(rootHeaders: Buffer): Buffer {
  return Buffer.from(rootHeaders.toString('latin1').replace(/^Message-ID:/m, `${emptySubjectField}\r\nMessage-ID:`), 'latin1');
}

interface BodyPart {
  /** MailComposer's content type for the part (getAlternatives): text first, then html. */
  contentType: string;
  content: string;
}

/** The alternatives MailComposer makes of a stored email; an empty text or html is no part, as there. */
function bodyParts(input: ComposeInput): BodyPart[] {
  const parts: BodyPart[] = [];
  if (input.text) parts.push({ contentType: textPlainType, content: input.text });
  if (input.html) parts.push({ contentType: textHtmlType, content: input.html });
  return parts;
}

/** Content-Type values as a MimeNode writes them: parsed, then built again (buildHeaders). */
const normalizedContentType = (value: string) => buildHeaderValue(parseHeaderValue(value, { stripComments: true }));
const textPlainType = normalizedContentType('text/plain; charset=utf-8');
const textHtmlType = normalizedContentType('text/html; charset=utf-8');

/**
 * A node of nobody's tree, used for its public `encodeHeaderValue`: address headers punycoded and
 * RFC 2047-encoded, Message-ID in angle brackets, the Date formatted, other text encoded when it needs
 * to be, exactly as MailComposer's nodes do. A fixed base boundary spares the random bytes its
 * constructor would draw.
 */
const headerEncoder = new MimeNode(false, { baseBoundary: 'unused' });

/** One header field as MimeNode.buildHeaders writes it: encoded, folded at 76; none for a blank value. */
function headerField(key: string, value: Parameters<MimeNode['encodeHeaderValue']>[1]): string | undefined {
  const encoded = headerEncoder.encodeHeaderValue(key, value);
  if (!String(encoded ?? '').trim()) return undefined;
  return foldLines(`${key}: ${encoded}`, 76);
}

/**
 * The message MailComposer would write for a text, html or html+text email: the root's headers in
 * its order (compile() sets From … Date on the content node; buildHeaders adds the transfer encoding
 * of a single part, MIME-Version, and moves Content-Type last), then the part or the
 * multipart/alternative with the part boundary of node 1.
 */
function composeDirect(input: ComposeInput, parts: BodyPart[], baseBoundary: string): Buffer {
  const replyTo = replyToOf(input);
  // compile() sets a field only when its value is truthy.
  const fields = [headerField('From', fromOf(input)), headerField('To', recipientOf(input.toAddress))];
  if (replyTo) fields.push(headerField('Reply-To', replyTo));
  fields.push(isWrittenAsIs(input.subject) ? subjectAsIsField(input.subject) : (headerField('Subject', subjectOf(input.subject)) ?? emptySubjectField));
  fields.push(headerField('Message-ID', messageIdOf(input)), headerField('Date', input.date));
  const single = parts.length === 1 ? encodePart(parts[0]) : undefined;
  if (single) fields.push(headerField('Content-Transfer-Encoding', single.transferEncoding));
  fields.push(headerField('MIME-Version', '1.0'));
  if (single) {
    fields.push(headerField('Content-Type', parts[0].contentType));
    return Buffer.concat([Buffer.from(headerBlock(fields)), single.body]);
  }
  // MimeNode._generateBoundary for the root, node 1: prefix, base boundary, part number.
  const boundary = `--_NmP-${baseBoundary}-Part_1`;
  fields.push(headerField('Content-Type', buildHeaderValue({ value: 'multipart/alternative', params: { boundary } })));
  const chunks: Buffer[] = [Buffer.from(headerBlock(fields))];
  parts.forEach((part, i) => {
    const encoded = encodePart(part);
    chunks.push(
      Buffer.from(`${i > 0 ? '\r\n' : ''}--${boundary}\r\n`),
      Buffer.from(headerBlock([headerField('Content-Type', part.contentType), headerField('Content-Transfer-Encoding', encoded.transferEncoding)])),
      encoded.body,
    );
  });
  chunks.push(Buffer.from(`\r\n--${boundary}--\r\n`));
  return Buffer.concat(chunks);
}

/**
 * Header lines are folded at whitespace only, so a subject with a run of ~1,000 characters and no space
 * (a pasted token, a long URL) would put a line over RFC 5322's 998 into the message, which receiving
 * MTAs may refuse or rewrap (breaking the DKIM signature). A run of more than 70 spaces or tabs is cut
 * by the folding into lines of blanks only, RFC 5322 §4.2's obsolete syntax (§4: not to be generated),
 * which receivers read back with the run shortened. Such a subject goes out as RFC 2047 encoded-words
 * instead, which fold anywhere, keep every blank, and which every client decodes back to the same text.
 */
export function subjectOf(subject: string): string {
  if (!hasUnbreakableRun(subject, 900) && !hasBlankRun(subject, 71) && !holdsEncodedWordForm(subject)) return subject;
  return encodeWord(subject, 'Q', 52);
}

/**
 * Text in the form `=?charset?B|Q?text?=` is an RFC 2047 encoded-word to every reader of the Subject
 * (§5(1); they decode it wherever it stands), and MailComposer writes a well-formed one as it is: a
 * subject that says `=?UTF-8?B?SGk=?=` was shown as "Hi". Such a subject is encoded whole, so it is shown
 * as written. Each `[^?\s]` run stops at the next '?' or blank: no backtracking over long input.
 */
const encodedWordForm = /=\?[^?\s]+\?[BbQq]\?[^?\s]*\?=/;
const holdsEncodedWordForm = (text: string) => text.includes('=?') && encodedWordForm.test(text);

/** Whether `text` has `length` spaces or tabs in a row (the limit custom header values have, emails/headers.ts). */
function hasBlankRun(text: string, length: number): boolean {
  let run = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    run = code === 0x20 || code === 0x09 ? run + 1 : 0;
    if (run >= length) return true;
  }
  return false;
}

/** Whether `text` has `length` characters in a row with no space or tab to fold at (one pass: `/\S{900}/` took ~1 s per MB). */
function hasUnbreakableRun(text: string, length: number): boolean {
  let run = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    run = code === 0x20 || code === 0x09 || code === 0x0a || code === 0x0d ? 0 : run + 1;
    if (run >= length) return true;
  }
  return false;
}

const headerBlock = (fields: (string | undefined)[]) => fields.filter((field) => field !== undefined).join('\r\n') + '\r\n\r\n';

/**
 * A plain ASCII address (what the send API accepts, nearly always) as the address object it parses to:
 * the same header, without running the address parser; anything else is parsed as MailComposer would.
 */
function recipientOf(address: string): Address {
  return plainAddress.test(address) ? { name: '', address } : address;
}
const plainAddress = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*$/;

/** MimeNode.getTransferEncoding for text content, and the content encoded with it. */
function encodePart(part: BodyPart): { transferEncoding: string; body: Buffer } {
  const bytes = Buffer.from(part.content);
  if (isPlainText(part.content) && !hasLongerLines(part.content, 76)) return { transferEncoding: '7bit', body: bytes };
  if (textEncodingOf(part.content) === 'Q') return { transferEncoding: 'quoted-printable', body: Buffer.from(qpWrap(qpEncode(bytes), 76), 'latin1') };
  return { transferEncoding: 'base64', body: Buffer.from(base64Wrap(base64Encode(bytes), 76), 'latin1') };
}

/** MailComposer's input for a stored email; exported so a test can build the reference with build(). */
export function mailOptions(input: ComposeInput, baseBoundary: string): ConstructorParameters<typeof MailComposer>[0] {
  return {
    from: fromOf(input),
    ...recipientHeadersOf(input),
    replyTo: replyToOf(input),
    subject: subjectOf(input.subject),
    date: input.date,
    messageId: messageIdOf(input),
    text: input.text ?? undefined,
    html: input.html ?? undefined,
    headers: customHeaders(input.headers),
    attachments: input.attachments.map(attachmentOptions),
    disableUrlAccess: true,
    disableFileAccess: true,
    xMailer: false,
    baseBoundary,
  };
}

/**
 * One stored attachment as MailComposer takes it. A text attachment goes as 7bit or quoted-printable when
 * it is plain text (transfer-encoding.ts textAttachmentPart), not as the base64 MailComposer writes
 * for every attachment. MimeNode keeps a base64 or quoted-printable it is given but decides a text part's
 * encoding again otherwise, and writes 7bit only for string content: 7bit content, all ASCII, is given as
 * the string of its bytes (the same bytes again when written).
 */
function attachmentOptions(attachment: ComposeAttachment) {
  const { contentType, transferEncoding } = textAttachmentPart(attachment.contentType, attachment.content);
  return {
    filename: attachment.name,
    contentType,
    content: transferEncoding === '7bit' ? attachment.content.toString('latin1') : attachment.content,
    ...(transferEncoding && { contentTransferEncoding: transferEncoding }),
    cid: attachment.contentId ?? undefined,
    // A forwarded email (message/rfc822, stored by SMTP submission) goes out as an attachment: MailComposer
    // makes a message/* part inline unless told otherwise, and Thunderbird and Apple Mail then show it as
    // part of the body. Its bytes go as they are (RFC 2046 §5.2.1 allows only 7bit or 8bit there).
    ...(isAttachedMessage(attachment) && { contentDisposition: 'attachment' as const }),
  };
}

type Address = string | { name: string; address: string };
/**
 * The message's own To/Cc lists when it had them (SMTP submission keeps them, as an MTA delivers a
 * message as written); otherwise `To:` is the email's one recipient. The envelope is set apart
 * (delivery/service.ts): a list names the other recipients, never sends to them.
 */
const recipientHeadersOf = (input: ComposeInput): { to: Address | Address[]; cc?: Address[] } =>
  input.headerRecipients && input.headerRecipients.to.length + input.headerRecipients.cc.length > 0
    ? { to: input.headerRecipients.to, cc: input.headerRecipients.cc }
    : { to: input.toAddress };
const fromOf = (input: ComposeInput): Address => (input.fromName ? { name: input.fromName, address: input.fromAddress } : input.fromAddress);
/** A submitted message's Reply-To list when it had several addresses; else the record's one. */
const replyToOf = (input: ComposeInput): Address | Address[] | undefined => {
  if (input.headerRecipients?.replyTo && input.headerRecipients.replyTo.length > 1) return input.headerRecipients.replyTo;
  return input.replyToAddress ? (input.replyToName ? { name: input.replyToName, address: input.replyToAddress } : input.replyToAddress) : undefined;
};
const messageIdOf = (input: ComposeInput): string => input.messageId ?? defaultMessageId(input.emailId, input.fromAddress);

/** The MimeNode fields serialisation reads (not in nodemailer's published types). */
interface MimeTreeNode {
  buildHeaders(): string;
  getTransferEncoding(): string | false;
  multipart: string | false;
  boundary: string;
  childNodes: MimeTreeNode[];
  content?: unknown;
  contentType?: string;
  _raw?: unknown;
}

/** MimeNode.stream() without streams: headers, encoded content, then the children between boundaries. */
function serializeNode(node: MimeTreeNode, out: Buffer[]): void {
  if (node._raw) throw new Error('raw MIME nodes are not composed here');
  out.push(Buffer.from(node.buildHeaders() + '\r\n\r\n'));
  if (node.content) out.push(encodeContent(node));
  if (!node.multipart) return;
  node.childNodes.forEach((child, i) => {
    out.push(Buffer.from(`${i > 0 ? '\r\n' : ''}--${node.boundary}\r\n`));
    serializeNode(child, out);
  });
  out.push(Buffer.from(`\r\n--${node.boundary}--\r\n`));
}

function encodeContent(node: MimeTreeNode): Buffer {
  const content = node.content;
  // Stored emails give strings (text, html) and Buffers (attachments); anything else would be a stream or a URL.
  if (typeof content !== 'string' && !Buffer.isBuffer(content)) throw new Error('only string and Buffer content is composed');
  const bytes = typeof content === 'string' ? Buffer.from(content) : content;
  const encoding = node.getTransferEncoding();
  if (encoding === 'base64') return Buffer.from(base64Wrap(base64Encode(bytes), 76), 'latin1');
  if (encoding === 'quoted-printable') {
    // qp.Encoder in binary mode (non-text parts) treats lone CR/LF as data; only text parts get QP here.
    if (!/^text\//i.test(node.contentType ?? '')) throw new Error('quoted-printable is only used for text parts');
    // A body text's line breaks are the text's, each one CRLF on the wire (withCrlfLineBreaks). An
    // attachment (a Buffer) reaches the recipient as the bytes that were sent, a lone LF or CR included,
    // which MailComposer's encoder writes as a line break (exactQuotedPrintable).
    return typeof content === 'string' ? Buffer.from(qpWrap(qpEncode(bytes), 76), 'latin1') : exactQuotedPrintable(content);
  }
  return bytes;
}

/** 8 random bytes per message for its MIME boundaries, drawn from a pool (one randomBytes call per 256 messages). */
let boundaryPool = Buffer.alloc(0);
function nextBaseBoundary(): string {
  if (boundaryPool.length < 8) boundaryPool = randomBytes(8 * 256);
  const value = boundaryPool.subarray(0, 8).toString('hex');
  boundaryPool = boundaryPool.subarray(8);
  return value;
}

/** `<emailId@sending-domain>`: unique, and on the sender's own domain as Gmail expects. */
export function defaultMessageId(emailId: string, fromAddress: string): string {
  return `<${emailId}@${domainOf(fromAddress)}>`;
}

/** A value MailComposer writes as it is, folded at its spaces. */
interface PreparedHeader {
  prepared: true;
  foldLines: true;
  value: string;
}

const writtenAsGiven = (name: string) => name.startsWith('list-') || name === 'in-reply-to';

function customHeaders(headers: Record<string, string> | null): Record<string, string | PreparedHeader> | undefined {
  if (!headers) return undefined;
  const out: Record<string, string | PreparedHeader> = {};
  for (const [name, value] of Object.entries(headers)) {
    // Header injection guard: names are tokens, values are single lines.
    if (!/^[!-9;-~]+$/.test(name) || reservedHeaders.has(name.toLowerCase())) continue;
    const line = String(value).replace(/[\r\n]+/g, ' ');
    // MailComposer encodes any value holding a quote or a non-ASCII character: a List-ID's quoted phrase
    // or a List-Unsubscribe URI with a quote must stay literal (the send API takes only ASCII there). It
    // also rewrites In-Reply-To word by word into <> (References too: givenReferences).
    const literal = writtenAsGiven(name.toLowerCase()) && /^[\x20-\x7e\t]*$/.test(line);
    out[name] = literal ? { prepared: true, foldLines: true, value: line } : line;
  }
  return out;
}
