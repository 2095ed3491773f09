import type { SplitterOptions } from '@zone-eu/mailsplit';
import { MailParser, simpleParser, type MailParserOptions, type ParsedMail } from 'mailparser';
import { AppError } from '../lib/errors.js';
import { hasMisreadCharacters, withUndeclaredCharsetsResolved, withUtf8HeaderLines } from './undeclared-charsets.js';

/** A message that arrived by SMTP (submission, inbound routes), parsed once with mailparser. */

/** The parser's options; its splitter takes them too, so the charset pass sees the parts the parser does. */
const parserOptions: MailParserOptions & SplitterOptions = {
  skipTextToHtml: true,
  skipImageLinks: true,
  skipHtmlToText: true,
  // A message/rfc822 part (a forwarded email) is one part, its bytes as sent, kept as an attached message
  // (submission-message.ts). Parsed into, one marked inline was flattened into the body (its headers but
  // From, To, Subject and Date dropped, its attachments made the message's own).
  ignoreEmbedded: true,
};

/**
 * A text/plain or text/html part that names a file (a `filename`, or a Content-Type `name`) is that file,
 * an attachment: RFC 2183 §2.3 makes the name the file's and `inline` only a display hint. Apple Mail
 * attaches every file `inline; filename=notes.txt`, and Exchange connectors send a log as a bare
 * `text/plain; name=log.txt`. mailparser 3.9 decides by type and disposition alone, so such a file was
 * appended to the message's text and listed nowhere. It stays the body when it is the message's only
 * part, the first part of its multipart (where mail clients show the body), or one of alternatives.
 * The parser offers no hook for this, so its one decision is amended here, and only for parsers given
 * `textPartIsFile` (ours, which may also refuse a name); the bounce reader and the tests parse as
 * mailparser does.
 */
type ParserNode = { isAttachment?: boolean; root?: boolean; parent?: ParserNode; children: ParserNode[]; contentType?: string };
const parserPrototype = MailParser.prototype as unknown as {
  createNode(this: { options: TextFileOptions }, node: { filename?: string | false }): ParserNode;
};
type TextFileOptions = { textPartIsFile?: (filename: string) => boolean };
const createNode = parserPrototype.createNode;
parserPrototype.createNode = function (mimeNode) {
  const node = createNode.call(this, mimeNode);
  const isFile = this.options.textPartIsFile;
  if (isFile && node.isAttachment === false && mimeNode.filename && isAttachedText(node) && isFile(mimeNode.filename)) node.isAttachment = true;
  return node;
};

function isAttachedText(node: ParserNode): boolean {
  const parent = node.parent;
  if (node.root || !parent) return false;
  return parent.contentType?.toLowerCase() !== 'multipart/alternative' && parent.children.indexOf(node) > 0;
}

/**
 * The parser's options for a message whose html is shown as it is (a received email's preview): the
 * `cid:` images it refers to (RFC 2392: a logo, a screenshot pasted into Outlook) made `data:` URLs, the
 * only images its sandbox loads, up to `maxLength` characters of them in all; references past that stay
 * `cid:`. Submission keeps `cid:` references, which the message it sends resolves.
 */
function inliningImages(maxLength: number): MailParserOptions & SplitterOptions {
  // maxInlinedImagesSize is mailparser's (3.9.31), not yet in @types/mailparser.
  return { ...parserOptions, skipImageLinks: false, maxInlinedImagesSize: maxLength } as MailParserOptions & SplitterOptions;
}

export interface MessageReading {
  /** Make the message's `cid:` images in its html `data:` URLs, up to this many characters (inliningImages). */
  inlineImagesMaxLength?: number;
  /** Whether a text part with this file name is an attachment (above); every named one is when not given. */
  textPartIsFile?: (filename: string) => boolean;
}

/**
 * The parser refuses some messages outright (over its 1,000 MIME parts, for one). That is the message,
 * not a passing fault: a permanent 554, or the client would retry it for days.
 */
export async function parseMessage(raw: Buffer, reading: MessageReading = {}): Promise<ParsedMail> {
  const imageOptions = reading.inlineImagesMaxLength === undefined ? parserOptions : inliningImages(reading.inlineImagesMaxLength);
  const options = { ...imageOptions, textPartIsFile: reading.textPartIsFile ?? (() => true) } as MailParserOptions & SplitterOptions;
  try {
    // 8-bit text that names no charset is read as its sender meant it (undeclared-charsets.ts).
    const message = withUtf8HeaderLines(raw);
    const parsed = await simpleParser(message, options);
    if (!hasMisreadCharacters(parsed)) return parsed;
    return await simpleParser(await withUndeclaredCharsetsResolved(message, options), options);
  } catch (error) {
    throw new AppError('parameters-invalid', `The message cannot be parsed: ${(error as Error).message}.`);
  }
}

/**
 * A raw header line of mailparser's `headerLines` as its value: what follows the first colon, unfolded
 * (RFC 5322 §2.2.3), not decoded (encoded words stay). Used by submission and by inbound routes.
 */
export function headerValue(line: string): string {
  const value = asUtf8(line.slice(line.indexOf(':') + 1));
  return value.replace(/\r?\n(?=[ \t])/g, '');
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * mailparser keeps a raw header line as one character per byte. Raw 8-bit values (RFC 6532, what apps
 * send without encoding) are UTF-8 nearly always: read them as such, so `X-Postino-Template: Grüße`
 * names the template the API would. Bytes that are not UTF-8 stay as they were read.
 */
function asUtf8(binary: string): string {
  if (!/[\x80-\xff]/.test(binary)) return binary;
  try {
    return strictUtf8.decode(Buffer.from(binary, 'latin1'));
  } catch {
    return binary;
  }
}
