import { simpleParser, type AddressObject, type Attachment, type SimpleParserOptions } from 'mailparser';
import { htmlToText } from '../render/html-to-text.js';
import { interpretReport, type ReportFinding, type ReportParts } from './interpret.js';
import { cutToLength } from '../lib/text.js';

/**
 * Parses one inbound report with mailparser and interprets it. Never throws: a message mailparser cannot
 * read is an `ignored` finding, so garbage at a valid VERP address is accepted and changes nothing.
 */
export async function readReport(raw: Buffer, options: { nullSender: boolean; toAddress?: string }): Promise<ReportFinding> {
  return interpretParsedReport(await parseReport(raw), options);
}

export type ParsedReport = Omit<ReportParts, 'nullSender'> | { unreadable: string };

/** The parse alone, once per message: a report for several VERP recipients is read for each of them. */
export async function parseReport(raw: Buffer): Promise<ParsedReport> {
  try {
    const parsed = await simpleParser(raw, {
      // Keep message/delivery-status as its own part instead of merging it into the text body.
      keepDeliveryStatus: true,
      // mailparser's html-to-text is superlinear in nesting: 1 MB of `<ol><li>` held the event loop 25 s.
      skipHtmlToText: true,
      skipTextLinks: true,
      skipImageLinks: true,
      skipTextToHtml: true,
      // A returned original marked `Content-Disposition: inline` (RFC 5965's own example, Microsoft's JMRP)
      // would be merged into the text without its header block; kept as a part, its Return-Path is read.
      // (An option of mailsplit, which mailparser hands its options to; its types do not list it.)
      ignoreEmbedded: true,
    } as SimpleParserOptions);
    const contentType = parsed.headers.get('content-type') as { value?: string; params?: Record<string, string> } | undefined;
    const isReport = contentType?.value?.toLowerCase() === 'multipart/report';
    return {
      reportType: isReport ? contentType?.params?.['report-type']?.toLowerCase() : undefined,
      subject: parsed.subject,
      from: addressText(parsed.from),
      autoSubmitted: autoSubmittedKeyword(parsed.headers.get('auto-submitted')),
      text: parsed.text || (typeof parsed.html === 'string' ? htmlToText(parsed.html) : ''),
      parts: parsed.attachments
        .filter((part) => part.contentType.startsWith('message/') && part.contentType !== 'message/rfc822')
        .map((part) => ({ contentType: part.contentType.toLowerCase(), text: part.content.toString('utf8') })),
      originalHeaders: returnedOriginalHeaders(parsed.attachments),
    };
  } catch (error) {
    return { unreadable: (error as Error).message };
  }
}

const returnedOriginalTypes = ['message/rfc822', 'text/rfc822-headers'];
/** Header blocks are small; the returned original's body is never read. */
const maxOriginalHeaderBytes = 64 * 1024;

/** RFC 5965 §2: a report's third part returns the original message, or only its header block. */
function returnedOriginalHeaders(attachments: Attachment[]): string | undefined {
  const original = attachments.find((part) => returnedOriginalTypes.includes(part.contentType.toLowerCase()));
  if (!original) return undefined;
  const text = original.content.subarray(0, maxOriginalHeaderBytes).toString('utf8');
  const end = text.search(/\r?\n\r?\n/);
  return end < 0 ? text : text.slice(0, end);
}

export function interpretParsedReport(parsed: ParsedReport, options: { nullSender: boolean; toAddress?: string }): ReportFinding {
  if ('unreadable' in parsed) return { kind: 'ignored', reason: cutToLength(`unreadable message: ${parsed.unreadable}`, 200) };
  return interpretReport({ ...parsed, nullSender: options.nullSender }, options.toAddress);
}

/** `Auto-Replied; owner-email="…"` → `auto-replied` (RFC 3834 §5: a keyword, then optional parameters). */
function autoSubmittedKeyword(value: unknown): string | undefined {
  return typeof value === 'string' ? value.split(';')[0].trim().toLowerCase() : undefined;
}

function addressText(from: AddressObject | AddressObject[] | undefined): string | undefined {
  const first = Array.isArray(from) ? from[0] : from;
  return first?.text;
}
