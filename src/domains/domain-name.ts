import { domainToASCII } from 'node:url';

/**
 * Longest prefix we add to a domain (the DKIM record `postino<yyyymm><6 hex>._domainkey.`, dkim-keys.ts
 * selectorFor), so every record name stays ≤ 253 characters (RFC 1035 §2.3.4).
 */
const longestRecordPrefix = 'postino000000abcdef._domainkey.'.length;
const labelPattern = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/**
 * Normalises a domain name as the owner typed it (case, trailing dot, IDN) to its ASCII form, or returns
 * undefined with no guessing when it is not a host name a sending domain can have.
 */
export function normalizeDomainName(input: string): string | undefined {
  // The root's dot may be typed as any IDNA label separator (UTS #46: U+3002, U+FF0E, U+FF61 map to "."):
  // domainToASCII would turn `example.com。` into `example.com.`, an empty last label.
  const trimmed = input.trim().toLowerCase().replace(/[.\u3002\uff0e\uff61]$/, '');
  // `%`: domainToASCII follows the URL standard and would decode `ex%41mple.com` to example.com.
  if (trimmed === '' || /[\s@/:%]/.test(trimmed)) return undefined;
  // IDNs are stored in their A-label form (RFC 5891), the form DNS and DKIM d= use.
  const ascii = domainToASCII(trimmed);
  if (!ascii || ascii.length + longestRecordPrefix > 253) return undefined;
  const labels = ascii.split('.');
  if (labels.length < 2 || !labels.every((label) => labelPattern.test(label))) return undefined;
  // A numeric top label means an IP address, not a domain.
  if (/^[0-9]+$/.test(labels[labels.length - 1])) return undefined;
  return ascii;
}

/** The domain part of an email address in normalised form, or undefined when there is none. */
export function domainOfAddress(address: string): string | undefined {
  const at = address.lastIndexOf('@');
  if (at < 1) return undefined;
  return normalizeDomainName(address.slice(at + 1));
}

/** The domain itself and every parent with at least two labels, longest first: a.b.example.com → … example.com. */
export function candidateDomains(domain: string): string[] {
  const labels = domain.split('.');
  const out: string[] = [];
  for (let i = 0; i <= labels.length - 2; i++) out.push(labels.slice(i).join('.'));
  return out;
}
