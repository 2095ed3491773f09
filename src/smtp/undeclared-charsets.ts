import { isUtf8 } from 'node:buffer';
import { Readable, Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Headers, Joiner, Splitter, type MessageChunk, type MimeNode, type SplitterChunk, type SplitterOptions } from '@zone-eu/mailsplit';
import type { ParsedMail } from 'mailparser';

// Old apps (PHP's mail(), printers and scanners, ERPs) submit 8-bit text in their platform's charset
// without naming it: no charset parameter, no MIME header at all, or charset=us-ascii written out over
// 8-bit bytes. The parser reads any such bytes as UTF-8, so "Café" was stored, and sent, as "Caf\uFFFD".
// Mail clients read them as windows-1252 when they are not UTF-8 (the WHATWG Encoding Standard's
// fallback for Western locales; Latin-1's superset, where 0x80 is € and 0x93/0x94 are quotes), and
// UTF-8 when they are (windows-1252 text is next to never valid UTF-8 by chance). So does submission.
// A charset the part names is the parser's to decode (iso-8859-1 is read as windows-1252 there too); so
// is one an html part without it names in a <meta>, as a browser would read the page.

/** Undeclared 8-bit bytes that are not UTF-8 are read in this charset. */
const fallbackCharset = 'windows-1252';

/**
 * Labels that name no charset for 8-bit bytes: us-ascii is RFC 2045 §5.2's default (written out, it says
 * no more than its absence), and unknown-8bit is RFC 1428's label for exactly these bytes (Sendmail's).
 */
const undeclaredLabels = new Set(['us-ascii', 'ascii', 'unknown-8bit']);

/**
 * The message with every line of its header section whose 8-bit bytes are not UTF-8 rewritten in
 * UTF-8, read as windows-1252. Raw 8-bit header bytes are RFC 6532 UTF-8 to the parser: PHP's mail() with a Latin-1
 * `Subject: R\xe9sum\xe9` or sender name gave "R\uFFFDsum\uFFFD". Lines that are UTF-8 (or ASCII) are left
 * as they are, and so is the body.
 */
export function withUtf8HeaderLines(raw: Buffer): Buffer {
  const headerEnd = headerSectionLength(raw);
  const header = raw.subarray(0, headerEnd);
  if (isUtf8(header)) return raw;
  return Buffer.concat([utf8HeaderLines(header), raw.subarray(headerEnd)]);
}

/** A header section with each line that is not UTF-8 read as windows-1252 and written in UTF-8; the other lines as they were. */
function utf8HeaderLines(header: Buffer): Buffer {
  const lines: Buffer[] = [];
  for (let start = 0; start < header.length; ) {
    const newline = header.indexOf(0x0a, start);
    const end = newline === -1 ? header.length : newline + 1;
    const line = header.subarray(start, end);
    lines.push(isUtf8(line) ? line : Buffer.from(decodeWindows1252(line), 'utf8'));
    start = end;
  }
  return Buffer.concat(lines);
}

/** The header section's length, up to and with the line break that ends its last line (CRLF or LF, as the parser splits). */
function headerSectionLength(raw: Buffer): number {
  const ends = [raw.indexOf('\r\n\r\n'), raw.indexOf('\n\n')].map((at, i) => (at === -1 ? raw.length : at + (i === 0 ? 2 : 1)));
  return Math.min(...ends);
}

/** 0x80–0x9F in windows-1252 (the five it leaves undefined stay C1 controls, as the WHATWG decoder has them); the rest is Latin-1. */
const windows1252High = '€\u0081‚ƒ„…†‡ˆ‰Š‹Œ\u008DŽ\u008F\u0090‘’“”•–—˜™š›œ\u009DžŸ';

function decodeWindows1252(bytes: Buffer): string {
  return bytes.toString('latin1').replace(/[\x80-\x9f]/g, (c) => windows1252High[c.charCodeAt(0) - 0x80]);
}

/**
 * Whether the parser may have misread undeclared 8-bit bytes. In a text part it puts U+FFFD where bytes
 * it read as UTF-8 were not. A header line of a part within the message that is not UTF-8 it reads as
 * Latin-1 (mailsplit's Headers): right for letters, but windows-1252's €, quotes and dashes (0x80–0x9F)
 * become C1 controls, which no file name has (`R\xe9sum\xe9 \x80.pdf` gave "Résumé \u0080.pdf").
 * Nearly all mail has neither, and is parsed once; a message with either is read again.
 */
export function hasMisreadCharacters(parsed: ParsedMail): boolean {
  if ([parsed.text, parsed.html].some((content) => typeof content === 'string' && content.includes('\uFFFD'))) return true;
  return (parsed.attachments ?? []).some((part) => part.filename !== undefined && /[\x80-\x9f\uFFFD]/.test(part.filename));
}

/**
 * The message with a charset put on each part the parser reads as text whose 8-bit bytes name no
 * charset and are not UTF-8 (windows-1252, or the one an html part names in a <meta>), and the header
 * lines of the parts within it in UTF-8 (withUtf8HeaderLines does the message's own before it is
 * parsed); every other part, and all the rest of the message, byte for byte as it was (mailsplit, the
 * parser's own splitter, with the parser's options: the same parts).
 */
export async function withUndeclaredCharsetsResolved(raw: Buffer, splitterOptions: SplitterOptions): Promise<Buffer> {
  const out: Buffer[] = [];
  await pipeline(Readable.from([raw]), new Splitter(splitterOptions), new CharsetLabeller(), new Joiner(), async (joined: AsyncIterable<Buffer>) => {
    for await (const chunk of joined) out.push(chunk);
  });
  return Buffer.concat(out);
}

/**
 * Passes the splitter's chunks through, holding back each text part without a charset until its body
 * has been read: its label can only be chosen from its bytes, and goes in its header, written first.
 */
class CharsetLabeller extends Transform {
  private held: { node: MimeNode; body: MessageChunk[] } | undefined;

  constructor() {
    super({ objectMode: true });
  }

  override _transform(chunk: SplitterChunk, _encoding: BufferEncoding, done: TransformCallback): void {
    if (this.held && chunk.type === 'body') {
      this.held.body.push(chunk);
      return done();
    }
    this.release().then(() => {
      if (chunk.type === 'node') withUtf8PartHeader(chunk);
      if (chunk.type === 'node' && isTextWithoutCharset(chunk)) this.held = { node: chunk, body: [] };
      else this.push(chunk);
      done();
    }, done);
  }

  override _flush(done: TransformCallback): void {
    this.release().then(() => done(), done);
  }

  private async release(): Promise<void> {
    const held = this.held;
    if (!held) return;
    this.held = undefined;
    // The bytes the part stands for, its transfer encoding (quoted-printable's =E9, base64) undone.
    const bytes = await transferDecoded(held.node, held.body);
    if (!isUtf8(bytes)) held.node.setCharset(charsetOfUndeclared(held.node, bytes));
    this.push(held.node);
    for (const chunk of held.body) this.push(chunk);
  }
}

/**
 * A part's header section, its lines that are not UTF-8 read as windows-1252 (as the message's own are,
 * withUtf8HeaderLines): an attachment's file name in raw Latin-1, with no RFC 2231 or 2047 encoding,
 * is what apps that write their own MIME send. The message's own header is UTF-8 by now, and left alone.
 */
function withUtf8PartHeader(node: MimeNode): void {
  const header = node.getHeaders();
  if (!isUtf8(header)) node.headers = new Headers(utf8HeaderLines(header));
}

/** The charset a text part's undeclared bytes, which are not UTF-8, are read in: its html's <meta> one, else windows-1252. */
function charsetOfUndeclared(node: MimeNode, bytes: Buffer): string {
  return (node.contentType === 'text/html' && htmlMetaCharset(bytes)) || fallbackCharset;
}

/**
 * How much of an html part is searched for a <meta> naming its charset. HTML's prescan (§13.2.3.2) reads
 * 1,024 bytes, and a browser that meets a later <meta> in the head reloads the page in its charset; mail
 * templates put long <style> blocks first, so the head is read, up to <body>, within this much.
 */
const metaSearchBytes = 65_536;

/**
 * The charset an html part names in `<meta charset="…">` or `<meta http-equiv="Content-Type"
 * content="text/html; charset=…">`, as the WHATWG Encoding Standard resolves its label (latin1 and
 * us-ascii are windows-1252, x-sjis is shift_jis), when it is one the parser decodes. The first usable
 * one counts, as in a browser's prescan. Not UTF-8: these bytes are not (a template's <meta> that the
 * app's bytes do not follow), and they are read as undeclared bytes are.
 */
function htmlMetaCharset(html: Buffer): string | undefined {
  const start = html.toString('latin1', 0, Math.min(html.length, metaSearchBytes));
  const bodyAt = start.search(/<body[\s>]/i);
  const head = bodyAt === -1 ? start : start.slice(0, bodyAt);
  for (const [tag] of head.matchAll(/<meta\b[^>]*>/gi)) {
    const label = /\bcharset\s*=\s*["']?\s*([^\s"'>;/]+)/i.exec(tag)?.[1];
    const charset = label === undefined ? undefined : decodableCharset(label);
    if (charset) return charset;
  }
  return undefined;
}

/**
 * Encodings the WHATWG standard has and the parser's decoder (iconv-lite) does not: labelled with one,
 * the part would be read as UTF-8 again, U+FFFD and all.
 */
const notDecodedByParser = new Set(['x-mac-cyrillic', 'x-user-defined']);

function decodableCharset(label: string): string | undefined {
  let encoding: string;
  try {
    encoding = new TextDecoder(label).encoding;
  } catch {
    return undefined; // no charset's label, or one the standard maps to "replacement" (iso-2022-kr)
  }
  // A <meta> naming UTF-16 means UTF-8 to a browser (HTML §13.2.3.3).
  if (encoding === 'utf-8' || encoding.startsWith('utf-16') || notDecodedByParser.has(encoding)) return undefined;
  return encoding;
}

/** A part the parser reads as the message's text (text/plain or text/html, not an attachment) whose charset it would take as UTF-8. */
function isTextWithoutCharset(node: MimeNode): boolean {
  if (node.multipart || (node.contentType !== 'text/plain' && node.contentType !== 'text/html')) return false;
  if (node.disposition && node.disposition !== 'inline') return false; // an attachment: its bytes are kept as they are
  return !node.charset || undeclaredLabels.has(node.charset.trim().toLowerCase());
}

async function transferDecoded(node: MimeNode, body: MessageChunk[]): Promise<Buffer> {
  const decoded: Buffer[] = [];
  for await (const chunk of Readable.from(body.map((chunk) => chunk.value)).pipe(node.getDecoder())) decoded.push(chunk as Buffer);
  return Buffer.concat(decoded);
}
