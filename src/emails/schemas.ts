import { z } from 'zod';
import { AppError } from '../lib/errors.js';
import { quotedKey } from '../lib/zod-issues.js';
import { describeIssues, emptyArrayAsObject, notAJsonObjectMessage, pageLimit, recordOf } from '../http/validate.js';
import { isValidAddress, withAsciiDomain } from './address.js';
import { attachmentContentType, isBase64 } from './attachments.js';
import { headerProblem, repeatedHeaderName } from './headers.js';
import { emailStatuses } from '../db/schema/emails.js';
import { calendarInstant } from '../lib/iso-date.js';

/** Spec §8 limits (strictly "fewer than"). */
export const limits = {
  markdown: 102_400,
  text: 102_400,
  html: 1_024_000,
  name: 100,
  attachmentsTotal: 2_621_440,
  attachmentName: 100,
  batch: 50,
  searchLimitMax: 100,
  searchLimitDefault: 20,
  searchStatusesMax: 20,
  searchTemplatePropsMax: 20,
} as const;

const nonNegativeNumber = z.number().finite().nonnegative();
/**
 * Spec §2.1's value kinds (strings, arrays of non-negative numbers, arrays of objects), and numbers and
 * booleans, rendered as their text: §4.2 sets no type rule on a send's props, and a client that sends
 * `{"orderTotal": 42}` or `{"isTrial": true}` must not be refused after changing its base URL (search
 * filters on them already). A plain object has no text to render and stays refused.
 */
export const propValue = z.union([
  z.string(),
  z.number().finite(),
  z.boolean(),
  z.array(nonNegativeNumber),
  z.array(recordOf(z.unknown())),
], { error: 'must be a string, a number, true or false, an array of non-negative numbers or an array of objects' });

export const asciiAddress = z.string().refine(isValidAddress, 'must be a valid ASCII email address');
export const displayName = z.string().min(1, 'must have at least 1 character').max(limits.name - 1, `must have fewer than ${limits.name} characters`);

const attachmentSchema = z.object({
  name: z
    .string()
    .max(limits.attachmentName - 1, `must have fewer than ${limits.attachmentName} characters`)
    .refine((name) => attachmentContentType(name) !== undefined, 'must end in one of the extensions .jpg .pdf .csv .html .png .gif .json .txt, with at least 1 character before it'),
  // "" is valid Base64 (RFC 4648 §10: BASE64("") = ""): an empty file, such as an export with no rows.
  content: z.string().refine(isBase64, 'must be valid Base64 (RFC 4648)'),
});

const headersSchema = recordOf(z.string()).superRefine((headers, ctx) => {
  for (const [name, value] of Object.entries(headers)) {
    const problem = headerProblem(name, value);
    if (problem) ctx.addIssue({ code: 'custom', path: [name], message: problem });
  }
  const repeated = repeatedHeaderName(Object.keys(headers));
  if (repeated) ctx.addIssue({ code: 'custom', path: [repeated[1]], message: `names the same header as ${repeated[0]} (header names ignore case): give it once` });
});

/** Future-ness is checked by the service against the injected clock. */
export const isoDate = z.string().refine((value) => !Number.isNaN(calendarInstant(value)), 'must be an ISO 8601 date');

/** Spec §4.2: replyToName is ignored without replyToAddress, so it is not validated then either. */
const withoutLoneReplyToName = (value: unknown) => {
  if (typeof value !== 'object' || value === null || !('replyToName' in value) || (value as { replyToAddress?: unknown }).replyToAddress !== undefined) return value;
  const { replyToName: _ignored, ...rest } = value as Record<string, unknown>;
  return rest;
};

/** `POST /v1/email/send` (spec §4.2). `toAddress` is checked before this schema (to-address-invalid). */
const sendEmailObject = z
  .object({
    toAddress: z.string(),
    subject: z.string().optional(),
    fromAddress: asciiAddress,
    fromName: displayName.optional(),
    replyToAddress: asciiAddress.optional(),
    replyToName: displayName.optional(),
    templateId: z.string().min(1).optional(),
    templateName: z.string().min(1).optional(),
    templateProps: recordOf(propValue).optional(),
    markdown: z.string().max(limits.markdown - 1, `must have fewer than ${limits.markdown} characters`).optional(),
    html: z.string().max(limits.html - 1, `must have fewer than ${limits.html} characters`).optional(),
    text: z.string().max(limits.text - 1, `must have fewer than ${limits.text} characters`).optional(),
    isOpenTracked: z.boolean().default(true),
    scheduledAt: isoDate.optional(),
    headers: headersSchema.optional(),
    attachments: z.array(attachmentSchema).optional(),
    // Set by the appliance's own senders (automations, broadcasts); accepted so they show up in search.
    automationId: z.string().optional(),
    messengerId: z.string().optional(),
  })
  .superRefine((input, ctx) => {
    for (const problem of contentProblems(input)) ctx.addIssue({ code: 'custom', path: problem.path, message: problem.message });
  });
export const sendEmailSchema = z.preprocess(withoutLoneReplyToName, sendEmailObject);

export type SendEmailInput = z.input<typeof sendEmailObject>;
export type ParsedSendEmail = z.output<typeof sendEmailObject>;

/** Legacy `POST /v1/mail/send` (spec §4.1): its own, stricter rules; mapped onto the modern input. */
export const legacySendSchema = z
  .object({
    toAddress: z.string(),
    fromAddress: asciiAddress,
    fromName: z
      .string()
      .min(1, 'must have at least 1 character')
      .max(100, 'must have at most 100 characters')
      .refine((v) => /^[\x20-\x7e]*$/.test(v), 'must be ASCII only')
      .optional(),
    subject: z.string().optional(),
    templateId: z.string().min(1).optional(),
    templateName: z.string().min(1).optional(),
    templateProps: recordOf(z.string({ error: 'must be a string' })).optional(),
    html: z.string().max(limits.html - 1).optional(),
    text: z.string().max(limits.text - 1).optional(),
    isOpenTracked: z.boolean().default(false),
  })
  .superRefine((input, ctx) => {
    for (const problem of contentProblems(input, 'legacy')) ctx.addIssue({ code: 'custom', path: problem.path, message: problem.message });
  });

interface ContentFields {
  templateId?: string;
  templateName?: string;
  markdown?: string;
  html?: string;
  text?: string;
  subject?: string;
  attachments?: { content: string }[];
}

/** The incompatible combinations of §4.1/§4.2, the "at least one content" rule and the size of attachments. */
function contentProblems(input: ContentFields, endpoint: 'send' | 'legacy' = 'send'): { path: string[]; message: string }[] {
  const problems: { path: string[]; message: string }[] = [];
  const add = (field: string, message: string) => problems.push({ path: [field], message });
  const hasTemplate = input.templateId !== undefined || input.templateName !== undefined;
  if (input.templateId !== undefined && input.templateName !== undefined) add('templateName', 'cannot be used together with templateId');
  if (hasTemplate) {
    for (const field of ['markdown', 'html', 'text'] as const) {
      if (input[field] !== undefined) add(field, 'cannot be used together with a template (templateId or templateName)');
    }
  }
  if (input.markdown !== undefined) {
    for (const field of ['html', 'text'] as const) if (input[field] !== undefined) add(field, 'cannot be used together with markdown');
  }
  if (!hasTemplate && input.markdown === undefined && input.html === undefined && input.text === undefined) {
    add('templateId', `one of templateId, templateName, ${endpoint === 'send' ? 'markdown, ' : ''}html or text is required`);
  }
  // §4.2's subject has no optional marker; §4.1 gives the legacy subject no rule at all (an empty one then).
  if (endpoint === 'send' && (input.html !== undefined || input.text !== undefined) && !hasTemplate && input.markdown === undefined && input.subject === undefined) {
    add('subject', 'is required with html or text content');
  }
  const total = (input.attachments ?? []).reduce((sum, a) => sum + (typeof a.content === 'string' ? a.content.length : 0), 0);
  if (total >= limits.attachmentsTotal) add('attachments', `combined Base64 content must have fewer than ${limits.attachmentsTotal} characters`);
  return problems;
}

/**
 * Validates one send object. `toAddress` is checked first with its own error code (COMPAT.md), then the
 * schema; `where` names the batch item in messages ("batch item 3").
 */
export function parseSendInput(value: unknown, where = 'body'): ParsedSendEmail {
  checkToAddress(value, where);
  const result = sendEmailSchema.safeParse(withoutNulls(value));
  if (!result.success) throw new AppError('parameters-invalid', describeIssues(result.error, where));
  return result.data;
}

/**
 * Fields of the modern send that the legacy endpoint does not take (spec §4.1). Ignored like any unknown
 * field, `scheduledAt` would send at once and `attachments` without them, so they are refused by name.
 */
const modernOnlyFields = ['scheduledAt', 'attachments', 'markdown', 'headers', 'replyToAddress', 'replyToName'];

export function parseLegacySendInput(value: unknown): ParsedSendEmail {
  checkToAddress(value, 'body');
  const modern = modernOnlyFields.filter((field) => (value as Record<string, unknown>)[field] != null);
  if (modern.length > 0) throw new AppError('parameters-invalid', `${modern.join(', ')}: not supported by POST /v1/mail/send; use POST /v1/email/send.`);
  const result = legacySendSchema.safeParse(withoutNulls(value));
  if (!result.success) throw new AppError('parameters-invalid', describeIssues(result.error, 'body'));
  return { ...result.data, templateProps: result.data.templateProps };
}

/**
 * An optional field sent as null is a field not sent: clients that build the body from nullable
 * variables (PHP arrays, Python dicts, typed SDKs) send `"fromName": null` for "none". A required field
 * sent as null is then reported missing.
 */
function withoutNulls(value: unknown): unknown {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
  if (!Object.values(value).includes(null)) return value; // the usual body: no copy on the send path
  return Object.fromEntries(Object.entries(value).filter(([, field]) => field !== null));
}

/** Not sent, null, or empty: an empty `cc: []` names nobody, so it loses nobody either. */
function isUnset(field: unknown): boolean {
  return field === undefined || field === null || field === '' || (Array.isArray(field) && field.length === 0);
}

function checkToAddress(value: unknown, where: string): void {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new AppError('parameters-invalid', notAJsonObjectMessage(value, where));
  }
  const to = (value as { toAddress?: unknown }).toAddress;
  const prefix = where === 'body' ? '' : `${where}: `;
  if (typeof to !== 'string' || !isValidAddress(to)) {
    throw new AppError('to-address-invalid', `${prefix}${toAddressProblem(to)}`);
  }
  // Unknown fields are ignored, but these would be ignored recipients: the mail would reach fewer
  // people than the caller asked for, and the answer would say queued.
  const extra = extraRecipientFields.filter((field) => !isUnset((value as Record<string, unknown>)[field]));
  if (extra.length > 0) {
    throw new AppError('parameters-invalid', `${prefix}${extra.join(', ')}: not supported; an email has one recipient (toAddress). Send a batch (up to 50 emails) for several.`);
  }
}

/**
 * What is wrong with a toAddress, said so a client can fix it: left out (it said "must be a valid ASCII
 * email address" of a body that had none), or in the display-name form other APIs take
 * (`Bob <bob@example.com>`), which this field does not.
 */
function toAddressProblem(to: unknown): string {
  if (to === undefined || to === null || to === '') return 'toAddress is required: the recipient\'s ASCII email address.';
  const bracketed = typeof to === 'string' ? /<([^<>]+)>\s*$/.exec(to)?.[1] : undefined;
  if (bracketed !== undefined && isValidAddress(bracketed)) return `toAddress must be the address alone (${bracketed}), without a name or angle brackets.`;
  return 'toAddress must be a valid ASCII email address.';
}

/** Recipient fields of other sending APIs (spec §4.2: CC, BCC and multiple recipients are batch sends). */
const extraRecipientFields = ['to', 'cc', 'bcc'];

/** A typo'd status would match nothing and look like an empty result: refused instead. */
const emailStatus = z.enum(emailStatuses);

/** `POST /v1/email/search` (spec §4.3). Cursors and limit may also come in the query string (COMPAT.md). */
const stringOrNull = z.string().nullish();
/**
 * A search filter's text: no NUL. SQLite's full-text query and JSON path parsers stop at one, so such a
 * filter could only fail inside the query (a 500) or match nothing.
 */
const searchText = z.string().refine((text) => !text.includes('\0'), 'must not contain a NUL character (\\u0000)');

/** The search's filters (spec §4.3 `query`). */
const searchFilterShape = {
  search: searchText.optional(),
  // An IDN domain as the client writes it (bücher.example) finds the A-label form SMTP submission
  // stores (xn--bcher-kva.example), as the suppression list does.
  toAddress: searchText.transform(withAsciiDomain).optional(),
  fromName: searchText.optional(),
  fromAddress: searchText.transform(withAsciiDomain).optional(),
  subject: searchText.optional(),
  templateName: searchText.optional(),
  templateId: searchText.optional(),
  automationId: searchText.optional(),
  messengerId: searchText.optional(),
  // Bounded so a query stays within SQLite's limits on variables and expression depth.
  status: z
    .union([emailStatus, z.array(emailStatus).max(limits.searchStatusesMax)], { error: `must be a status or an array of at most ${limits.searchStatusesMax} statuses, each one of ${emailStatuses.join(', ')}` })
    .optional(),
  scheduledAt: isoDate.optional(),
  // recordOf, as the send reads templateProps: a `__proto__` key is refused, not silently dropped
  // from the filter (which then matched every email).
  templateProps: recordOf(z.union([searchText, z.number(), z.boolean()], { error: 'must be a string, a number or a boolean' }))
    .refine((props) => Object.keys(props).every((key) => !key.includes('\0')), 'keys must not contain a NUL character (\\u0000)')
    .refine((props) => Object.keys(props).length <= limits.searchTemplatePropsMax, `must have at most ${limits.searchTemplatePropsMax} keys`)
    .optional(),
};

const searchQuery = z.object(searchFilterShape, {
  // A filter the search does not know is refused, not ignored: ignored, a misspelt one
  // (`query: {toaddress: …}`, `{to: …}`) matched every email of the project, and a client that
  // deletes the scheduled emails a search finds deleted all of them.
  error: (issue) => (issue.code === 'unrecognized_keys' ? `${issue.keys.map(quotedKey).join(', ')} ${issue.keys.length === 1 ? 'is not a filter' : 'are not filters'}; the filters are ${Object.keys(searchFilterShape).join(', ')}` : undefined),
}).strict();

/** A search's own fields; the query string may carry the cursors and limit too (emails/routes.ts). */
export const searchEmailsFields = z.object({
  paginationCursorNext: stringOrNull,
  paginationCursorPrev: stringOrNull,
  limit: pageLimit(limits.searchLimitMax, limits.searchLimitDefault),
  // A filter sent as null is a filter not sent, as for the send's optional fields.
  query: z.preprocess((value) => withoutNulls(emptyArrayAsObject(value)), searchQuery).nullish(),
});

/**
 * Other top-level fields are ignored, as on every endpoint, except filters put beside `query` instead of
 * in it (`{"status": "scheduled"}`): ignored, the search widened to every email of the project. And the
 * two cursors ask for opposite pages: both at once is refused rather than one silently dropped.
 */
export const searchEmailsSchema = z.preprocess(
  (body, ctx) => {
    const misplaced = body !== null && typeof body === 'object' ? Object.keys(body).filter((key) => Object.hasOwn(searchFilterShape, key)) : [];
    for (const key of misplaced) ctx.addIssue({ code: 'custom', path: [key], message: 'is a filter: put it inside query' });
    return body;
  },
  searchEmailsFields.superRefine((search, ctx) => {
    if (typeof search.paginationCursorNext === 'string' && typeof search.paginationCursorPrev === 'string') {
      ctx.addIssue({ code: 'custom', path: ['paginationCursorPrev'], message: 'give one cursor: paginationCursorNext for the next page or paginationCursorPrev for the previous one, not both' });
    }
  }),
);
export type SearchEmailsInput = z.output<typeof searchEmailsFields>;
