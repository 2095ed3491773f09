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
  .refine((body) => body.domain != null || body.name != null, { message: 'give the domain name as domain (or name)', path: ['domain'] })
  // Both, naming two domains: which one was meant is a guess (`domain` was taken and `name` dropped unsaid).
  .refine((body) => body.domain == null || body.name == null || sameName(body.domain, body.name), {
    message: 'domain and name name different domains; give one of them',
    path: ['name'],
  });

/** Spelt alike but for case or a root dot (`Example.org.`): one domain, whatever the service then makes of it. */
function sameName(a: string, b: string): boolean {
  const plain = (name: string) => name.trim().toLowerCase().replace(/\.$/, '');
  return plain(a) === plain(b);
}

export type CreateDomainInput = z.infer<typeof createDomainSchema>;
