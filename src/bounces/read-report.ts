import { simpleParser, type AddressObject } from 'mailparser';
import { interpretReport, type ReportFinding } from './interpret.js';

/**
 * Parses one inbound report with mailparser and interprets it. Never throws: a message mailparser cannot
 * read is an `ignored` finding, so garbage at a valid VERP address is accepted and changes nothing.
 */
export async function readReport(raw: Buffer, options: { nullSender: boolean; toAddress?: string }): Promise<ReportFinding> {
  try {
    const parsed = await simpleParser(raw, {
      // Keep message/delivery-status as its own part instead of merging it into the text body.
      keepDeliveryStatus: true,
      skipHtmlToText: false,
      skipTextLinks: true,
      skipImageLinks: true,
      skipTextToHtml: true,
    });
    const contentType = parsed.headers.get('content-type') as { value?: string; params?: Record<string, string> } | undefined;
    const isReport = contentType?.value?.toLowerCase() === 'multipart/report';
    return interpretReport(
      {
        reportType: isReport ? contentType?.params?.['report-type']?.toLowerCase() : undefined,
        subject: parsed.subject,
        from: addressText(parsed.from),
        text: parsed.text ?? '',
        parts: parsed.attachments
          .filter((part) => part.contentType.startsWith('message/') && part.contentType !== 'message/rfc822')
          .map((part) => ({ contentType: part.contentType.toLowerCase(), text: part.content.toString('utf8') })),
        nullSender: options.nullSender,
      },
      options.toAddress,
    );
  } catch (error) {
    return { kind: 'ignored', reason: `unreadable message: ${(error as Error).message}`.slice(0, 200) };
  }
}

function addressText(from: AddressObject | AddressObject[] | undefined): string | undefined {
  const first = Array.isArray(from) ? from[0] : from;
  return first?.text;
}
