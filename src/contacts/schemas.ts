import { z } from 'zod';
import { isValidAddress, withAsciiDomain } from '../emails/address.js';
import { emptyArrayAsObject, idCursor, pageLimit, pageOffset, recordOf } from '../http/validate.js';
import { isTimeZone, timeZoneSpelling } from '../lib/time-zone.js';
import { quotedKey } from '../lib/zod-issues.js';

/** Bounds of one contact (spec §4.5 shows none): enough for any CRM profile, small enough to read whole. */
export const contactLimits = {
  identifierMax: 200,
  keyNameMax: 100,
  stringValueMax: 10_000,
  propsMax: 200,
  groupsMax: 100,
  groupIdMax: 100,
  contactIdMax: 100,
  noteMax: 10_000,
  /** Contact query `limit` (spec §6: its maximum is not shown). */
  queryLimitMax: 100,
  queryLimitDefault: 20,
  /** Rules of one filter, and ids or groups listed in one query: bounded so a query stays a small SQL statement. */
  rulesMax: 50,
  listedMax: 100,
} as const;

/**
 * Text a contact field or a filter holds: no NUL (SQLite's JSON path and text functions stop at one) and
 * no other control characters.
 */
const plainText = (max: number) =>
  z
    .string()
    .max(max, `must have at most ${max} characters`)
    .refine((text) => !/[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/.test(text), 'must not contain control characters');

/**
 * A custom property's name: printable, no `"` or `\` (it becomes a quoted JSON path label in the query
 * engine, where SQLite has no escapes), ≤ 100 characters.
 */
export const keyNameRule = 'must be 1 to 100 printable characters, without " or \\';
export function isKeyName(name: string): boolean {
  return name.length >= 1 && name.length <= contactLimits.keyNameMax && !/["\\\x00-\x1f\x7f]/.test(name);
}

/** spec §4.5: a value is a string or a number; null removes the property from the contact. */
const propValue = z.union([plainText(contactLimits.stringValueMax), z.number().finite(), z.null()], {
  error: 'must be a string, a number or null (null removes the property)',
});

const emailAddress = z
  .string()
  .trim()
  .transform(withAsciiDomain)
  .refine(isValidAddress, 'must be a valid ASCII email address');

export const groupId = plainText(contactLimits.groupIdMax).trim().min(1, 'must not be empty');
/** A contact's id as the API gives it (24 characters); bounded so a query or a stored draft cannot carry megabytes in one. */
export const contactId = plainText(contactLimits.contactIdMax).min(1, 'must not be empty');

/**
 * `POST /v1/contacts` (spec §4.5). `emailAddress` is required; `identifier` and `customProps` carry no
 * optional marker in the spec but the official SDKs' own examples leave them out, so they are optional.
 * `note` is an extension (the contact object has it). `identifier`, `isSubscribed` and `groups` sent as
 * null are not sent (docs/errors.md); `timezone` and `note` sent as null are cleared.
 */
export const upsertContactSchema = z.object({
  emailAddress,
  identifier: plainText(contactLimits.identifierMax).trim().min(1, 'must not be empty').nullish(),
  isSubscribed: z.boolean({ error: 'must be true or false' }).nullish(),
  // null clears the zone, as it clears the note and, in customProps, a property.
  timezone: z.string().refine(isTimeZone, 'must be an IANA time zone name, such as Europe/Prague or America/New_York').transform(timeZoneSpelling).nullable().optional(),
  customProps: recordOf(propValue)
    .refine((props) => Object.keys(props).every(isKeyName), `keys ${keyNameRule}`)
    .refine((props) => Object.keys(props).length <= contactLimits.propsMax, `must have at most ${contactLimits.propsMax} keys`)
    .nullish(),
  groups: z.array(groupId).max(contactLimits.groupsMax).nullish(),
  note: plainText(contactLimits.noteMax).nullable().optional(),
});
export type UpsertContactInput = z.output<typeof upsertContactSchema>;

/** `GET /v1/contacts` (spec §4.5): up to 100 per page; `limit` is an extension. */
export const listContactsSchema = z.object({
  paginationCursorNext: idCursor,
  limit: pageLimit(100, 100),
});
export type ListContactsInput = z.output<typeof listContactsSchema>;

export const ruleOperators = ['equals', 'notEquals', 'includes', 'notIncludes', 'gt', 'gte', 'lt', 'lte', 'in', 'notIn', 'anyValue', 'noValue'] as const;
export type RuleOperator = (typeof ruleOperators)[number];

const ruleValue = z.union([plainText(contactLimits.stringValueMax), z.number().finite(), z.boolean(), z.null(), z.array(z.union([plainText(contactLimits.stringValueMax), z.number().finite()])).max(contactLimits.listedMax)], {
  error: `must be a string, a number, a boolean, null, or (for in and notIn) an array of at most ${contactLimits.listedMax} strings and numbers`,
});

/** A key the object does not know is refused with the ones it does (ignored, a misspelt filter matched everyone). */
export function strictObject<Shape extends z.core.$ZodLooseShape>(shape: Shape, what: string) {
  const known = Object.keys(shape).join(', ');
  return z.strictObject(shape, {
    error: (issue) =>
      issue.code === 'unrecognized_keys' ? `${issue.keys.map(quotedKey).join(', ')} ${issue.keys.length === 1 ? `is not a ${what}` : `are not ${what}s`}; the ${what}s are ${known}` : undefined,
  });
}

const filterRule = strictObject(
  {
    field: z.string({ error: 'is required (a contact field such as emailAddress or customProps.<keyName>)' }).min(1).max(200),
    operator: z.enum(ruleOperators, { error: `must be one of ${ruleOperators.join(', ')}` }).nullish().transform((operator) => operator ?? 'equals'),
    value: ruleValue.optional(),
  },
  'rule field',
);
export type FilterRule = z.output<typeof filterRule>;

export const matchMode = z.enum(['all', 'any'], { error: 'must be all or any' });

/** spec §4.5 filter object: `rules` combined by `match` (all by default). Messenger recipients use it too. */
export const contactFilterSchema = strictObject(
  {
    match: matchMode.nullish().transform((value) => value ?? 'all'),
    rules: z.array(filterRule).max(contactLimits.rulesMax).nullish().transform((rules) => rules ?? []),
  },
  'filter field',
);
export type ContactFilter = z.output<typeof contactFilterSchema>;

export const oneOrMany = (item: z.ZodType<string>) =>
  z
    .union([item, z.array(item).max(contactLimits.listedMax)], { error: `must be a string or an array of at most ${contactLimits.listedMax} strings` })
    .transform((value) => (Array.isArray(value) ? value : [value]));

/** `POST /v1/contacts/query` (spec §4.5). A filter the query does not know is refused, not ignored. */
export const queryContactsSchema = z
  .preprocess(
    emptyArrayAsObject,
    strictObject(
      {
        contactId: oneOrMany(contactId).nullish(),
        groupId: oneOrMany(groupId).nullish(),
        search: plainText(254).nullish(),
        isSubscribed: z.boolean({ error: 'must be true or false' }).nullish(),
        match: matchMode.nullish().transform((value) => value ?? 'all'),
        filter: contactFilterSchema.nullish(),
        offset: pageOffset(),
        limit: pageLimit(contactLimits.queryLimitMax, contactLimits.queryLimitDefault),
      },
      'query field',
    ),
  );
/** The fields of a contacts query a query string may carry (COMPAT.md "Transport"), with the body's rules. */
export const queryContactsQueryStringSchema = z.object({ offset: pageOffset(), limit: pageLimit(contactLimits.queryLimitMax, contactLimits.queryLimitDefault) });
export type QueryContactsInput = z.output<typeof queryContactsSchema>;
