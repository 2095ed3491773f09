import { z } from 'zod';
import { routeResponseModes } from '../db/schema/inbound.js';
import { normalizeDomainName } from '../domains/domain-name.js';
import { isDotAtom } from '../emails/address.js';
import { idCursor, pageLimit } from '../http/validate.js';

const responseMode = z.enum(routeResponseModes, { error: `must be one of ${routeResponseModes.join(', ')}` });
const isEnabled = z.boolean({ error: 'must be true or false' });

/**
 * spec §4.9 localPart: `*` (catch-all, the default) or up to 128 characters without `@`. Stored
 * lowercased: mailbox names are matched without case, as every mail system in use does.
 */
const localPart = z
  .string()
  .trim()
  .min(1, 'must not be empty (leave it out, or send "*", for a catch-all)')
  .max(128, 'must be at most 128 characters')
  // The local parts the send API and this listener take (emails/address.ts): a dot-atom.
  .refine((value) => value === '*' || isDotAtom(value), 'must be "*" or the part of an address before @ (letters, digits and !#$%&\'*+/=?^_`{|}~-, dots between them; no @ or spaces)')
  .transform((value) => value.toLowerCase());

/** `POST /v1/inbound/routes` (spec §4.9). An optional field sent as null is not sent (docs/errors.md). */
export const createRouteSchema = z.object({
  domain: z
    .string()
    .transform((value, ctx) => {
      const name = normalizeDomainName(value);
      if (!name) ctx.addIssue({ code: 'custom', message: 'must be a domain name, such as inbound.example.com' });
      return name ?? '';
    }),
  localPart: localPart.nullish().transform((value) => value ?? '*'),
  responseMode: responseMode.nullish().transform((value) => value ?? 'accept'),
  isEnabled: isEnabled.nullish().transform((value) => value ?? true),
});
export type CreateRouteInput = z.output<typeof createRouteSchema>;

/** `PATCH /v1/inbound/routes/{routeId}`: responseMode, isEnabled; at least one (spec §4.9). */
export const updateRouteSchema = z
  .object({ responseMode: responseMode.nullish(), isEnabled: isEnabled.nullish() })
  .refine((input) => (input.responseMode ?? null) !== null || (input.isEnabled ?? null) !== null, 'give at least one of responseMode, isEnabled');
export type UpdateRouteInput = z.output<typeof updateRouteSchema>;

/** `GET /v1/inbound/emails` (spec §4.9): limit 1–100 (default 20), cursors both ways. */
export const listReceivedSchema = z
  .object({
    limit: pageLimit(100, 20),
    paginationCursorNext: idCursor,
    paginationCursorPrev: idCursor,
  })
  // As email search: with both, one was silently ignored (the previous page came back).
  .refine((input) => input.paginationCursorNext === undefined || input.paginationCursorPrev === undefined, {
    path: ['paginationCursorPrev'],
    message: 'give one cursor: paginationCursorNext for the next page or paginationCursorPrev for the previous one, not both',
  });
export type ListReceivedInput = z.output<typeof listReceivedSchema>;
