import { classifyDnsError, type Resolver } from './resolver.js';

/**
 * mailauth asks `(name, rrtype)` as node:dns `resolve` does, and tells "no such record" (ENOTFOUND,
 * ENODATA) from "try later" by the error codes node:dns gives, which the appliance's resolver passes on.
 */
export function mailauthResolver(resolver: Resolver, budget: number) {
  let made = 0;
  return async (name: string, rrtype: string): Promise<any> => {
    if (++made > budget) throw Object.assign(new Error(`more than ${budget} DNS lookups for one check`), { code: 'EREFUSED' });
    try {
      return await lookUp(resolver, name, rrtype);
    } catch (error) {
      // mailauth's SPF knows ETIMEOUT and EREFUSED as temporary; any other failure (SERVFAIL) of an
      // include: it skipped as if the include did not match, and went on to pass or fail, where a receiver
      // says temperror (RFC 7208 §5.2). Its own verdict, which it takes as given, says so.
      // A name the resolver refuses to ask (a label over 63 characters: EBADNAME) is no passing fault:
      // RFC 7208 §4.3 makes it "none", which an include turns into permerror (§5.2).
      if (error instanceof Error && !('spfResult' in error)) {
        const code = (error as { code?: string }).code;
        const failure = code === 'EBADNAME' ? 'permerror' : classifyDnsError(error) === 'temporary' ? 'temperror' : undefined;
        if (failure) Object.assign(error, { spfResult: { error: failure, text: `DNS lookup of ${rrtype} ${name} failed (${code ?? error.message})` } });
      }
      throw error;
    }
  };
}

async function lookUp(resolver: Resolver, name: string, rrtype: string): Promise<unknown> {
  switch (rrtype) {
    case 'TXT':
      return resolver.resolveTxt(name).then((records) => records.map(withRelativeSpfNames));
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
}

/**
 * An SPF record's domain names without a trailing dot: RFC 7208's domain-spec allows one (an absolute
 * name, the same name), receivers accept it, and mailauth calls the whole record a permanent error
 * ("Invalid domain mx.example.net."). Other TXT records are as they were.
 */
function withRelativeSpfNames(chunks: string[]): string[] {
  const value = chunks.join('');
  if (!/^v=spf1( |$)/i.test(value)) return chunks;
  return [value.replace(/([:=][^\s:=/]*[^\s:=/.])\.(?=[\s/]|$)/g, '$1')];
}
