import { z } from 'zod';
import { decodeImage, languageTag } from '../render/layout.js';
import { nullsAsAbsent } from '../http/validate.js';

const hexColor = z.string().regex(/^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})$/, 'must be a hex colour like #1a73e8');

/**
 * `emailTemplateDesign` as existing clients send it (COMPAT.md "Project design"). Strict at every level:
 * a misspelt key, in a group too (`colors.primary`), would change nothing, silently.
 */
export const emailTemplateDesignSchema = z
  .object({
    logo: z
      .object({
        sizeWidth: z.number().int().min(10).max(600).optional(),
        href: z.string().max(2000).nullable().optional(),
        // base64 image, at most ~512 kB decoded: it is inlined into every email. Checked the way the
        // renderer reads it, so a logo that would silently not render is refused here instead.
        file: z
          .string()
          .max(700_000)
          .refine((file) => decodeImage(file) !== null, 'must be a base64 PNG, JPEG, GIF, WebP or SVG image (a data: URI prefix is allowed; an SVG that runs and loads nothing: see docs/templates.md)')
          .nullable()
          .optional(),
      })
      .strict()
      .nullable()
      .optional(),
    // A font name, or a family list: it ends up in CSS, so nothing that could close a declaration or a tag.
    font: z.object({ name: z.string().min(1).max(100).regex(/^[A-Za-z0-9 ,'_-]+$/, 'letters, digits, spaces, commas, quotes, - and _ only') }).strict().nullable().optional(),
    colors: z
      .object({ highlight: hexColor.optional(), isDarkModeEnabled: z.boolean().optional() })
      .strict()
      .nullable()
      .optional(),
    // An extension: the language the emails are written in, as a BCP 47 tag ("de", "pt-BR"), for the
    // html's `lang` (screen readers choose their voice by it). Without it a left-to-right email says "en".
    language: z
      .string()
      .max(35)
      .regex(languageTag, 'must be a BCP 47 language tag like "de" or "pt-BR"')
      .nullable()
      .optional(),
    unsubscribeText: z.string().max(500).nullable().optional(),
    footerTextTransactional: z.string().max(2000).nullable().optional(),
  })
  .strict();

// Unknown top-level fields are ignored, as on every other endpoint: a client that sends back the project
// it read (`{id, name, createdAt, …}`) with its name changed must not get a 400. Inside
// `emailTemplateDesign` they are refused instead: a misspelt design key would change nothing, silently.
const projectName = z
  .string({ error: 'must be a string' })
  .trim()
  .min(1, 'must not be empty')
  .max(200, 'must be at most 200 characters');

export const updateProjectSchema = z.preprocess(nullsAsAbsent(['name']), z
  .object({
    name: projectName.optional(),
    emailTemplateDesign: emailTemplateDesignSchema.nullable().optional(),
  })
  .refine((v) => v.name !== undefined || v.emailTemplateDesign !== undefined, 'give at least one of name, emailTemplateDesign'));

export const createLinkedProjectSchema = z.object({ name: projectName });

/**
 * A body without `id` deletes the caller's own project, so one that has fields but no `id` is refused:
 * its target named otherwise (`projectId`, as email records call it) was read as no target at all, and the
 * caller's own project went with everything in it. With `id`, other fields are ignored (the project as read).
 */
export const deleteProjectSchema = z
  .object({ id: z.string().optional() })
  .passthrough()
  .refine((body) => body.id !== undefined || Object.keys(body).length === 0, {
    message: 'give the project to delete as id (or no body to delete the project of the key)',
    path: ['id'],
  })
  .optional();

export type UpdateProjectInput = z.infer<typeof updateProjectSchema>;
export type CreateLinkedProjectInput = z.infer<typeof createLinkedProjectSchema>;
