import { isUtf8 } from 'node:buffer';
import { parseHeaderValue } from 'nodemailer/lib/mime-funcs';

/**
 * Content-Transfer-Encoding of text: the body's parts (compose.ts encodePart) and text attachments. Pure.
 */
export type TransferEncoding = '7bit' | 'quoted-printable' | 'base64';

/**
 * MimeNode._getTextEncoding: quoted-printable when Latin letters outnumber the non-ASCII and control
 * characters, base64 otherwise.
 */
export function textEncodingOf(value: string): 'Q' | 'B' {
  let nonLatin = 0;
  let latin = 0;
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (code <= 0x08 || code === 0x0b || code === 0x0c || (code >= 0x0e && code <= 0x1f) || code >= 0x80) nonLatin++;
    else if ((code >= 0x41 && code <= 0x5a) || (code >= 0x61 && code <= 0x7a)) latin++;
  }
  return nonLatin < latin ? 'Q' : 'B';
}

/**
 * How a `text/*` attachment goes out: its Content-Type and transfer encoding, decided in one pass over its
 * bytes; any other type as it is, with no encoding (MailComposer's own: base64, or 7bit/8bit for a
 * message/*).
 *
 * The label: a text type without a charset parameter gains `charset=utf-8` when its bytes are 8-bit and
 * valid UTF-8. The send API derives the type from the file's extension (`notes.txt` → `text/plain`), and
 * a part without a charset is US-ASCII (RFC 2046 §4.1.2): a recipient's client showed "GrÃ¼ÃŸe" for the
 * "Grüße" the sender wrote. Other 8-bit text stays unlabelled: its charset cannot be known.
 *
 * The encoding: MailComposer encodes every attachment as base64, and filters score a base64 text part
 * whose content is plain 7-bit text (rspamd MIME_BASE64_TEXT_BOGUS, 1 point, besides MIME_BASE64_TEXT).
 * So text goes as 7bit when nothing on the way could change it, else as quoted-printable; base64 stays
 * for content that is not text: with a NUL (RFC 2045 §2.7/§2.8 allow none in 7bit or 8bit data), or
 * 8-bit bytes not valid in its charset (only UTF-8 is checked; others' 8-bit text stays base64). Mostly
 * non-Latin text goes as base64 too, as the body's parts do (`textEncodingOf`): quoted-printable would
 * make it about three times its size, and the rule above is about 7-bit text only.
 */
export function textAttachmentPart(contentType: string, content: Buffer): { contentType: string; transferEncoding?: TransferEncoding } {
  if (!/^text\//i.test(contentType)) return { contentType };
  if (content.includes(0)) return { contentType, transferEncoding: 'base64' };
  if (isAscii(content)) return { contentType, transferEncoding: isUnchangeableSevenBitText(content) ? '7bit' : 'quoted-printable' };
  const charset = parseHeaderValue(contentType).params.charset;
  const readsAsUtf8 = charset === undefined || /^\s*utf-?8\s*$/i.test(charset);
  if (!readsAsUtf8 || !isUtf8(content)) return { contentType, transferEncoding: 'base64' };
  return {
    contentType: charset === undefined ? `${contentType}; charset=utf-8` : contentType,
    transferEncoding: textEncodingOf(content.toString('utf8')) === 'Q' ? 'quoted-printable' : 'base64',
  };
}

function isAscii(content: Buffer): boolean {
  for (let i = 0; i < content.length; i++) if (content[i] >= 0x80) return false;
  return true;
}

const CR = 0x0d;
const LF = 0x0a;
const isBlank = (byte: number | undefined) => byte === 0x20 || byte === 0x09;

/** The longest line a 7bit text attachment has, as MailComposer's text parts (mime-funcs hasLongerLines(…, 76)). */
const sevenBitLineLength = 76;
/**
 * MimeNode decides a text node's encoding again, and holds string content over 128 KiB to have long lines
 * (mime-funcs hasLongerLines), whatever its lines: longer 7-bit text goes as quoted-printable, which for
 * such text differs from it only in its `=` signs, written `=3D`.
 */
const sevenBitMaxBytes = 128 * 1024;

/**
 * RFC 2045 §2.7 7bit data that no hop rewrites: printable ASCII and tabs, in lines of at most 76
 * characters ended by CRLF, none ending in a space or tab (RFC 2045 §6.7(3): transports may strip those).
 * A bare LF or CR is no line break in text (RFC 2046 §4.1.1) but would be made one on the wire.
 */
function isUnchangeableSevenBitText(content: Buffer): boolean {
  if (content.length > sevenBitMaxBytes) return false;
  let lineLength = 0;
  for (let i = 0; i < content.length; i++) {
    const byte = content[i];
    if (byte === CR && content[i + 1] === LF) {
      if (isBlank(content[i - 1])) return false;
      lineLength = 0;
      i++;
      continue;
    }
    if ((byte < 0x20 && byte !== 0x09) || byte > 0x7e) return false;
    if (++lineLength > sevenBitLineLength) return false;
  }
  // The last line is followed by the CRLF of the next boundary.
  return !isBlank(content[content.length - 1]);
}

/**
 * Quoted-printable (RFC 2045 §6.7) that decodes to exactly `content`, in one pass. Its CRLFs are the
 * text's line breaks and stay hard line breaks (rule 4). A lone LF or CR is no line break of text (RFC
 * 2046 §4.1.1: CRLF is its only one), and written as it is it would become CRLF on the wire (RFC 5322
 * §2.3; smtp-connection and withCrlfLineBreaks make it one), so the recipient would decode other bytes
 * than were sent, as from MailComposer's encoder: it is written `=0A` or `=0D`, followed by a soft line
 * break so that the encoded text still reads a line per line. A space or tab that ends a line is encoded
 * (rule 3: transports may strip it); encoded lines hold at most 76 characters, a soft break's `=`
 * included (rule 5).
 */
export function exactQuotedPrintable(content: Buffer): Buffer {
  // At most 6 characters a byte: a lone LF or CR takes 3 and its soft break 3 more; other bytes take 3 at
  // most, and a soft break after at least 24 of them.
  const out = Buffer.allocUnsafe(content.length * 6 + 3);
  let pos = 0;
  let column = 0;
  for (let i = 0; i < content.length; i++) {
    const byte = content[i];
    if (byte === CR && content[i + 1] === LF) {
      out[pos++] = CR;
      out[pos++] = LF;
      column = 0;
      i++;
      continue;
    }
    const loneBreak = byte === CR || byte === LF;
    const literal = quotedPrintableLiteral[byte] === 1 && !(isBlank(byte) && endsLine(content, i));
    const end = column + (literal ? 1 : 3);
    // The 76th character is a soft break's `=` unless the line ends there.
    if (end > 76 || (end === 76 && (loneBreak ? i + 1 < content.length : !endsLine(content, i)))) {
      pos = writeSoftBreak(out, pos);
      column = 0;
    }
    if (literal) {
      out[pos++] = byte;
      column++;
    } else {
      out[pos++] = 0x3d; // =
      out[pos++] = hexDigits[byte >> 4];
      out[pos++] = hexDigits[byte & 0x0f];
      column += 3;
    }
    if (loneBreak && i + 1 < content.length) {
      pos = writeSoftBreak(out, pos);
      column = 0;
    }
  }
  return out.subarray(0, pos);
}

/** Whether the byte at `i` is the last of its line: followed by CRLF or by nothing. */
const endsLine = (content: Buffer, i: number) => i + 1 === content.length || (content[i + 1] === CR && content[i + 2] === LF);

function writeSoftBreak(out: Buffer, pos: number): number {
  out[pos] = 0x3d; // =
  out[pos + 1] = CR;
  out[pos + 2] = LF;
  return pos + 3;
}

const hexDigits = Buffer.from('0123456789ABCDEF', 'latin1');

/** 1 for the bytes RFC 2045 §6.7(2) lets be written as they are: printable ASCII but `=`, and the tab. */
const quotedPrintableLiteral = new Uint8Array(256).map((_, byte) => (byte === 0x09 || (byte >= 0x20 && byte <= 0x7e && byte !== 0x3d) ? 1 : 0));
