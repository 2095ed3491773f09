import { createHash, timingSafeEqual } from 'node:crypto';
import type { UrlSigner } from '../lib/signing.js';

/**
 * VERP envelope senders (`MAIL FROM:<bounce-<emailId>-<tag>@<mailFromDomain>>`). Email ids are
 * time-ordered and visible in every Message-ID, so the id alone would let anyone bounce or "complain"
 * about any email; the tag is a MAC of the id under the appliance's signing secret. The tag is lowercase
 * hex because some MTAs change the case of local parts, and 80 bits is far beyond online guessing.
 */
export interface Verp {
  /** The Return-Path for one email. */
  address(emailId: string, mailFromDomain: string): string;
  /** The email id when `address` is an authentic VERP address, else undefined. */
  parse(address: string): string | undefined;
}

const tagLength = 20;
const localPartPattern = /^bounce-([0-9a-f]{24})-([0-9a-f]{20})$/;

export function createVerp(signer: UrlSigner): Verp {
  // signer.sign with no expiry is deterministic: a keyed MAC of the payload. Hashing the token keeps us
  // independent of the token's layout while staying secret-dependent.
  const tagOf = (emailId: string) => createHash('sha256').update(signer.sign(`verp:${emailId}`)).digest('hex').slice(0, tagLength);
  return {
    address: (emailId, mailFromDomain) => `bounce-${emailId}-${tagOf(emailId)}@${mailFromDomain}`,
    parse(address) {
      const at = address.lastIndexOf('@');
      if (at <= 0) return undefined;
      const match = localPartPattern.exec(address.slice(0, at).toLowerCase());
      if (!match) return undefined;
      const [, emailId, tag] = match;
      return timingSafeEqual(Buffer.from(tag), Buffer.from(tagOf(emailId))) ? emailId : undefined;
    },
  };
}
