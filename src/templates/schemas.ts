import { z } from 'zod';
import { emptyArrayAsObject, idCursor, nullsAsAbsent, pageLimit, recordOf } from '../http/validate.js';

/** Spec §8 limits. Lengths count characters (code points), emailText counts UTF-8 bytes ("1 MB"). */
export const templateLimits = {
  name: 200,
  subject: 1000,
  emailTextBytes: 1024 * 1024,
  preheader: 200,
  layoutId: 20,
  pageSize: 100,
} as const;

const countChars = (value: string) => {
  let n = 0;
  for (const _ of value) n++;
  return n;
};

const maxChars = (max: number) =>
  z.string().refine((value) => value.length <= max || countChars(value) <= max, `must be at most ${max} characters`);

const templateName = maxChars(templateLimits.name).refine((value) => value.trim() !== '', 'must not be empty');
const subject = maxChars(templateLimits.subject);
const emailText = z
  .string()
  .refine((value) => Buffer.byteLength(value, 'utf8') <= templateLimits.emailTextBytes, 'must be at most 1 MB (1048576 bytes of UTF-8)')
  .nullable();
const preheader = maxChars(templateLimits.preheader).nullable();
const layoutId = maxChars(templateLimits.layoutId).nullable();

/**
 * Content nodes are checked node by node by the renderer's `normalizeContent` (which also assigns ids and
 * names the failing path); here only the outer shape is checked.
 */
const content = z.array(z.unknown());

/**
 * Items of an array of objects that PHP wrote as `[]` (empty maps): `[{"a": "1"}, []]` is `[{"a": "1"}, {}]`,
 * as the send reads templateProps (emails/schemas.ts), so an iterated node repeats for that item too.
 */
function withPhpEmptyItems(props: Record<string, unknown>): Record<string, unknown> {
  for (const [key, value] of Object.entries(props)) {
    if (Array.isArray(value) && value.some((item) => Array.isArray(item) && item.length === 0)) props[key] = value.map(emptyArrayAsObject);
  }
  return props;
}

/** Spec §2.1: sample prop values are strings, arrays of non-negative numbers, or arrays of objects. */
export const samplePropsSchema = recordOf(z.unknown())
  .transform(withPhpEmptyItems)
  .superRefine((props, ctx) => {
    for (const [key, value] of Object.entries(props)) {
      if (!isSamplePropValue(value)) {
        ctx.addIssue({
          code: 'custom',
          path: [key],
          message: 'must be a string, an array of non-negative numbers, or an array of objects',
        });
      }
    }
  })
  .nullable();

function isSamplePropValue(value: unknown): boolean {
  if (typeof value === 'string') return true;
  if (!Array.isArray(value)) return false;
  if (value.every((item) => typeof item === 'number' && Number.isFinite(item) && item >= 0)) return true;
  return value.every((item) => item !== null && typeof item === 'object' && !Array.isArray(item));
}

/**
 * Create body (spec §4.6). Unknown keys are dropped rather than refused so a gallery template (which also
 * carries `slug`, `tags`, `version`) or a retrieved template can be posted back as-is.
 */
export const createTemplateSchema = z.preprocess(nullsAsAbsent(['content']), z.object({
  name: templateName,
  subject,
  content: content.optional(),
  emailText: emailText.optional(),
  preheader: preheader.optional(),
  sampleProps: samplePropsSchema.optional(),
  layoutId: layoutId.optional(),
}));

const updateFields = ['name', 'subject', 'content', 'emailText', 'preheader', 'sampleProps', 'layoutId'] as const;

/** PATCH: the create fields, all optional; only provided fields change, so an empty patch is an error. */
export const updateTemplateSchema = z.preprocess(nullsAsAbsent(['name', 'subject', 'content']), z
  .object({
    name: templateName.optional(),
    subject: subject.optional(),
    content: content.optional(),
    emailText: emailText.optional(),
    preheader: preheader.optional(),
    sampleProps: samplePropsSchema.optional(),
    layoutId: layoutId.optional(),
  })
  .refine((value) => updateFields.some((field) => value[field] !== undefined), `give at least one of ${updateFields.join(', ')}`));

// Any case: Python's requests sends True/False for booleans in query strings.
const booleanFlag = z
  .preprocess((value) => (typeof value === 'string' ? value.toLowerCase() : value), z.enum(['true', 'false', '1', '0', '']))
  .transform((value) => value === 'true' || value === '1');

/** `GET /v1/templates` query. Empty values count as absent (`?paginationCursorNext=` on the first page). */
export const listTemplatesQuerySchema = z.object({
  paginationCursorNext: z.preprocess(emptyToUndefined, idCursor),
  limit: z.preprocess(emptyToUndefined, pageLimit(templateLimits.pageSize, templateLimits.pageSize)),
  includeContent: z.preprocess(emptyToUndefined, booleanFlag.default(false)),
});

function emptyToUndefined(value: unknown): unknown {
  if (Array.isArray(value)) value = value[value.length - 1];
  return value === '' || value === null ? undefined : value;
}

/**
 * Props for a preview; null or absent falls back to the template's sampleProps. Read as the send reads
 * them, PHP's `[]` items included: a preview dropped the row such an item renders in the delivered email.
 */
const templateProps = recordOf(z.unknown()).transform(withPhpEmptyItems).nullable().optional();

export const previewSavedSchema = z.preprocess(emptyArrayAsObject, z.object({ templateProps }).optional());

/** A whole unsaved template (e.g. a gallery template) plus the props to render it with. */
export const previewUnsavedSchema = z.object({
  subject,
  content: content.optional(),
  preheader: preheader.optional(),
  emailText: emailText.optional(),
  layoutId: layoutId.optional(),
  sampleProps: samplePropsSchema.optional(),
  templateProps,
});

export type CreateTemplateInput = z.infer<typeof createTemplateSchema>;
export type UpdateTemplateInput = z.infer<typeof updateTemplateSchema>;
export type ListTemplatesQuery = z.infer<typeof listTemplatesQuerySchema>;
export type PreviewUnsavedInput = z.infer<typeof previewUnsavedSchema>;
