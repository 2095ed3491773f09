import { z } from 'zod';
import { contactFilterSchema, contactId, groupId, matchMode, oneOrMany, strictObject } from '../contacts/schemas.js';
import { draftContentTypes } from '../db/schema/messenger.js';
import { asciiAddress, displayName, isoDate, limits, propValue } from '../emails/schemas.js';
import { nullsAsAbsent, pageLimit, pageOffset, recordOf } from '../http/validate.js';

/** Bounds of a draft (spec §8 shows none for Messenger): the send's own, and the templates' subject. */
export const draftLimits = {
  subjectMax: 1000,
  templateIdMax: 100,
  /** The editor's document (`richTextValue`), serialised. */
  richTextMaxChars: 1_024_000,
  /** `GET /v1/messenger` (spec §8: default 20, maximum not shown). */
  listLimitMax: 100,
  listLimitDefault: 20,
} as const;

/**
 * spec §2.10 recipients: the contact query's filters (contacts/query.ts). `isSubscribed` accepts only
 * true: a broadcast never goes to contacts who unsubscribed.
 */
const recipientsSchema = strictObject(
  {
    contactId: oneOrMany(contactId).nullish(),
    groupId: oneOrMany(groupId).nullish(),
    filter: contactFilterSchema.nullish(),
    match: matchMode.nullish(),
    isSubscribed: z.literal(true, { error: 'accepts only true: a broadcast goes to subscribed contacts only' }).nullish(),
  },
  'recipients field',
);
type RecipientsInput = z.output<typeof recipientsSchema>;

const richTextValue = recordOf(z.unknown()).refine((value) => JSON.stringify(value).length <= draftLimits.richTextMaxChars, `must serialise to at most ${draftLimits.richTextMaxChars} characters`);

/**
 * The fields a client writes (spec §2.10). The object it read may be sent back whole as a partial update:
 * the fields the appliance sets (`id`, `createdAt`, `stats`, …) are accepted and ignored; any other
 * unknown key is refused by name, where ignored a misspelt field lost what was written in it.
 */
const draftShape = {
  subject: z.string().max(draftLimits.subjectMax, `must have at most ${draftLimits.subjectMax} characters`),
  fromName: displayName.nullable(),
  fromAddress: asciiAddress.nullable(),
  html: z.string().max(limits.html - 1, `must have fewer than ${limits.html} characters`).nullable(),
  richTextValue: richTextValue.nullable(),
  templateId: z.string().min(1).max(draftLimits.templateIdMax).nullable(),
  templateProps: recordOf(propValue).nullable(),
  recipients: recipientsSchema,
  scheduledAt: isoDate.nullable(),
  isTimezoneScheduled: z.boolean({ error: 'must be true or false' }),
  contentType: z.enum(draftContentTypes, { error: `must be one of ${draftContentTypes.join(', ')}` }),
  // spec §3.2: a client moves a draft to queued (or, an extension, back to draft); the rest are the appliance's.
  status: z.enum(['draft', 'queued'], { error: 'can be set to draft or queued; scheduled, processing and DONE are set by the appliance' }),
  // Read-only fields of the draft object: ignored when sent back.
  id: z.unknown(),
  projectId: z.unknown(),
  createdAt: z.unknown(),
  updatedAt: z.unknown(),
  stats: z.unknown(),
  error: z.unknown(),
};
const readOnlyFields = ['id', 'projectId', 'createdAt', 'updatedAt', 'stats', 'error'] as const;

/** Fields that cannot be null: sent as null, they are not sent. */
const withoutNullsOfNotNullable = nullsAsAbsent(['subject', 'recipients', 'isTimezoneScheduled', 'contentType', 'status']);

/** Every field optional: a create sets what it sends (defaults for the rest), an update changes what it sends. */
export const draftPatchSchema = z.preprocess(withoutNullsOfNotNullable, strictObject(
  Object.fromEntries(Object.entries(draftShape).map(([key, schema]) => [key, schema.optional()])) as { [K in keyof typeof draftShape]: z.ZodOptional<(typeof draftShape)[K]> },
  'draft field',
)).transform((input) => {
  const out: Record<string, unknown> = { ...input };
  for (const key of readOnlyFields) delete out[key];
  return out as DraftPatch;
});

const writableFields = Object.keys(draftShape).filter((key) => !(readOnlyFields as readonly string[]).includes(key));

/** PATCH: as a create, but it must change something (as the other PATCH endpoints; `{}` answered `{}` and changed only updatedAt). */
export const draftUpdateSchema = draftPatchSchema.refine((patch) => Object.keys(patch).length > 0, `give at least one of ${writableFields.join(', ')}`);

export interface DraftPatch {
  subject?: string;
  fromName?: string | null;
  fromAddress?: string | null;
  html?: string | null;
  richTextValue?: Record<string, unknown> | null;
  templateId?: string | null;
  templateProps?: Record<string, unknown> | null;
  recipients?: RecipientsInput;
  scheduledAt?: string | null;
  isTimezoneScheduled?: boolean;
  contentType?: (typeof draftContentTypes)[number];
  status?: 'draft' | 'queued';
}

/** `GET /v1/messenger` (spec §4.7): offset and limit from the query string. */
export const listDraftsSchema = z.object({
  offset: pageOffset(),
  limit: pageLimit(draftLimits.listLimitMax, draftLimits.listLimitDefault),
});
export type ListDraftsInput = z.output<typeof listDraftsSchema>;
