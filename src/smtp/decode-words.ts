/**
 * Decodes RFC 2047 encoded-words (`=?charset?Q|B?text?=`) in an unstructured header value. Mail libraries
 * (nodemailer among them) Q-encode X- header values containing quotes or braces, so control headers
 * like `X-Postino-Template-Props: {"a":"b"}` arrive encoded. mailparser leaves unknown headers raw.
 */
export function decodeWords(value: string): string {
  // §6.2: whitespace between two adjacent encoded-words is dropped.
  const joined = value.replace(/(\?=)\s+(?==\?)/g, '$1');
  return joined.replace(/=\?([^?]+)\?([QqBb])\?([^?]*)\?=/g, (word, charset: string, encoding: string, text: string) => {
    try {
      const bytes = encoding.toUpperCase() === 'B' ? Buffer.from(text, 'base64') : decodeQ(text);
      return new TextDecoder(charset.replace(/\*.*$/, '').toLowerCase(), { fatal: false }).decode(bytes);
    } catch {
      return word; // unknown charset: leave the word as sent
    }
  });
}

function decodeQ(text: string): Buffer {
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch === '_') bytes.push(0x20);
    else if (ch === '=' && /^[0-9A-Fa-f]{2}$/.test(text.slice(i + 1, i + 3))) {
      bytes.push(parseInt(text.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(ch.charCodeAt(0) & 0xff);
  }
  return Buffer.from(bytes);
}

/** A run of encoded-words, each separated from the next by whitespace only (RFC 2047 §6.2). */
const encodedWordRun = /=\?[^?\s]+\?[QqBb]\?[^?\s]*\?=(?:[ \t]+=\?[^?\s]+\?[QqBb]\?[^?\s]*\?=)*/g;

/**
 * For fields that must stay ASCII (List-*, message ids): a run of encoded-words is decoded only when it
 * decodes to printable ASCII. Python's email package encodes a URI longer than a line so that it can
 * fold it (that must be decoded to be a URI again); nodemailer encodes a non-ASCII comment, where RFC
 * 2047 §5 allows an encoded-word (that must stay encoded to stay ASCII).
 */
export function decodeAsciiWords(value: string): string {
  return value.replace(encodedWordRun, (run) => {
    const decoded = decodeWords(run);
    return /^[\x20-\x7e\t]*$/.test(decoded) ? decoded : run;
  });
}
