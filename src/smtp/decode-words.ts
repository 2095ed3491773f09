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
