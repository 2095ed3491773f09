import { z } from 'zod';

/**
 * `{domain}` as in the spec; `{name}` too, as some clients send it (COMPAT.md "Domains"). The one not
 * given may be null (an SDK serialising its whole options object), as an optional null counts as not sent.
 */
export const createDomainSchema = z
  .object({
    domain: z.string().min(1).max(300).nullish(),
    name: z.string().min(1).max(300).nullish(),
  })
  .refine((body) => body.domain != null || body.name != null, { message: 'give the domain name as domain (or name)', path: ['domain'] });

export type CreateDomainInput = z.infer<typeof createDomainSchema>;
