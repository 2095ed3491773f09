import { z } from 'zod';

/** `{domain}` as in the spec; `{name}` too, as some clients send it (COMPAT.md "Domains"). */
export const createDomainSchema = z
  .object({
    domain: z.string().min(1).max(300).optional(),
    name: z.string().min(1).max(300).optional(),
  })
  .refine((body) => body.domain !== undefined || body.name !== undefined, { message: 'give the domain name as domain (or name)', path: ['domain'] });

export type CreateDomainInput = z.infer<typeof createDomainSchema>;
