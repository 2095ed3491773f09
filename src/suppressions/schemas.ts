import { z } from 'zod';
import { isValidAddress, withAsciiDomain } from '../emails/address.js';
import { pageLimit } from '../http/validate.js';

export const addSuppressionSchema = z.object({
  // The rule sends use for toAddress: every address the appliance sends to can be suppressed by hand
  // (zod's email() refuses some it sends to, such as a!b@example.com).
  // An IDN domain is taken in its A-label form, the one submission sends to (suppressions/repo.ts
  // normalizeAddress); a non-ASCII local part stays refused.
  emailAddress: z.string().trim().transform(withAsciiDomain).refine(isValidAddress, 'must be a valid ASCII email address'),
  // An optional field sent as null counts as not sent (docs/errors.md), as in the send API.
  reason: z.string().trim().min(1).max(100).nullish(),
  detail: z.string().max(1000).nullish(),
});
export type AddSuppressionInput = z.infer<typeof addSuppressionSchema>;

export const listSuppressionsSchema = z.object({
  limit: pageLimit(100, 20),
  /** Opaque cursor from the previous page's `paginationCursorNext`. */
  paginationCursorNext: z.preprocess((value) => (value === '' ? undefined : value), z.string().max(500).optional()),
});
export type ListSuppressionsInput = z.infer<typeof listSuppressionsSchema>;
