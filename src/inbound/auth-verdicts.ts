import type { Logger } from '../lib/logger.js';
import type { Resolver } from '../lib/resolver.js';

/**
 * SPF, DKIM, DMARC and ARC verdicts of a received message (spec §2.8 `auth`), by mailauth, looking up
 * through the appliance's resolver (DESIGN convention 4: `dns.servers`, a real DNS server in tests).
 */
export interface AuthVerdicts {
  spf: { result: string; domain: string | null };
  dkim: { result: string; domain: string | null; selector: string | null }[];
  dmarc: { result: string; domain: string | null; policy: string | null };
  arc: { result: string };
  /** The Authentication-Results header mailauth would add (RFC 8601). */
  authenticationResults: string;
}

export interface Connection {
  ip: string;
  helo: string;
  mailFrom: string;
  /** This host's name, the Authentication-Results authserv-id. */
  mta: string;
}

/** A check that cannot be done (a DNS outage, a message mailauth cannot read) is `temperror`, not a crash. */
const unknown: AuthVerdicts = {
  spf: { result: 'temperror', domain: null },
  dkim: [],
  dmarc: { result: 'temperror', domain: null, policy: null },
  arc: { result: 'temperror' },
  authenticationResults: '',
};

export async function verifyAuth(raw: Buffer, connection: Connection, resolver: Resolver, log: Logger): Promise<AuthVerdicts> {
  try {
    // Loaded with the first message (and kept out of the bundle, build.mjs): mailauth and what it loads
    // cost an idle appliance ~17 MB of RSS, which one that receives no mail for routes never needs.
    const { authenticate } = await import('mailauth');
    const result = (await authenticate(raw, {
      ip: connection.ip,
      helo: connection.helo,
      sender: connection.mailFrom,
      mta: connection.mta,
      resolver: mailauthResolver(resolver),
      disableBimi: true,
    })) as any;
    return {
      spf: { result: result.spf?.status?.result ?? 'none', domain: result.spf?.domain ?? null },
      dkim: (result.dkim?.results ?? [])
        .filter((entry: any) => entry.status?.result !== 'none')
        .map((entry: any) => ({ result: entry.status?.result ?? 'none', domain: entry.signingDomain ?? null, selector: entry.selector ?? null })),
      dmarc: { result: result.dmarc?.status?.result ?? 'none', domain: result.dmarc?.domain ?? null, policy: result.dmarc?.policy ?? null },
      arc: { result: result.arc?.status?.result ?? 'none' },
      authenticationResults: typeof result.headers === 'string' ? result.headers.trim() : '',
    };
  } catch (error) {
    // Said, not only stored as temperror: a mailauth that cannot load would otherwise pass unnoticed.
    log.warn('authentication checks failed', { error });
    return unknown;
  }
}

/**
 * mailauth asks `(name, rrtype)` as node:dns `resolve` does, and tells "no such record" (ENOTFOUND,
 * ENODATA) from "try later" by the error codes node:dns gives, which the appliance's resolver passes on.
 */
function mailauthResolver(resolver: Resolver) {
  return async (name: string, rrtype: string): Promise<any> => {
    switch (rrtype) {
      case 'TXT':
        return resolver.resolveTxt(name);
      case 'MX':
        return resolver.resolveMx(name);
      case 'A':
        return resolver.resolve4(name);
      case 'AAAA':
        return resolver.resolve6(name);
      case 'CNAME':
        return resolver.resolveCname(name);
      default:
        // PTR (iprev, SPF's deprecated ptr mechanism): not looked up, as if absent.
        throw Object.assign(new Error(`${rrtype} lookups are not made`), { code: 'ENOTFOUND' });
    }
  };
}
