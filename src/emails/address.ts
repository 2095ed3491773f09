import { normalizeDomainName } from '../domains/domain-name.js';

/**
 * A pragmatic RFC 5321 mailbox check: ASCII only (spec §4.1/§4.2), dot-atom local part ≤ 64, a domain
 * of valid labels with a non-numeric last label, ≤ 254 in total. Quoted local parts are refused: no
 * client of this API sends them and they break many receivers.
 */
const localPart = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/;
const label = /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;

export function isValidAddress(value: string): boolean {
  if (value.length > 254) return false;
  const at = value.lastIndexOf('@');
  if (at <= 0 || at > 64) return false;
  if (!isDotAtom(value.slice(0, at))) return false;
  const labels = value.slice(at + 1).split('.');
  if (labels.length < 2) return false;
  if (!labels.every((l) => label.test(l))) return false;
  return !/^\d+$/.test(labels[labels.length - 1]);
}

/** The part of an address before `@` as this module takes it: a dot-atom (no leading, trailing or double dot). */
export function isDotAtom(localPartOfAddress: string): boolean {
  return localPart.test(localPartOfAddress);
}

/**
 * The address with its domain in A-labels (RFC 5891), the form DNS and this module's checks use.
 * smtp-server (RCPT TO) and mailparser (To, Cc, From) hand `anna@xn--bcher-kva.example` over as
 * `anna@bücher.example`, which the ASCII-only check above would refuse although the client wrote an
 * ASCII address. The local part is left as it is: a non-ASCII one needs SMTPUTF8 and stays refused.
 */
export function withAsciiDomain(address: string): string {
  const at = address.lastIndexOf('@');
  const domain = address.slice(at + 1);
  if (at < 0 || /^[\x00-\x7f]*$/.test(domain)) return address;
  const ascii = normalizeDomainName(domain);
  return ascii ? `${address.slice(0, at)}@${ascii}` : address;
}

/** Lower-cased domain of an address (delivery groups jobs by it); an address with no `@` is all domain. */
export function domainOf(address: string): string {
  return address.slice(address.lastIndexOf('@') + 1).toLowerCase();
}
