import type { ReceivedAddress, ReceivedAddresses, ReceivedAttachment } from '../db/schema/inbound.js';
import { cutToLength } from '../lib/text.js';

/**
 * What a received email keeps of its message's fields, each shown per recipient and in every list page
 * and webhook: a sender chooses their size. One message whose To listed 160,000 addresses made a page of
 * 100 received emails past the heap (the process died at every listing). The raw message has it all.
 * Applied when a message is stored, and again when one stored before the bounds is shown.
 */
export const addressesKept = 50;
const nameKept = 200;
const emailKept = 320;
const subjectKept = 10_000;
const attachmentNameKept = 255;

/** `to`, `cc` and `replyTo` cut to their first `addressesKept`, with `addressesTruncated` when one was longer. */
export function boundedAddresses(addresses: ReceivedAddresses): ReceivedAddresses {
  const { from, to, cc, replyTo } = addresses;
  const truncated = addresses.addressesTruncated === true || [to, cc, replyTo].some((list) => list.length > addressesKept);
  const kept = (list: ReceivedAddress[]) => list.slice(0, addressesKept).map(boundedAddress);
  return { from: boundedAddress(from), to: kept(to), cc: kept(cc), replyTo: kept(replyTo), ...(truncated ? { addressesTruncated: true as const } : {}) };
}

export function boundedSubject(subject: string): string {
  return cutToLength(subject, subjectKept);
}

export function boundedAttachment(attachment: ReceivedAttachment): ReceivedAttachment {
  return { name: cutToLength(attachment.name, attachmentNameKept), contentType: cutToLength(attachment.contentType, attachmentNameKept), size: attachment.size };
}

function boundedAddress(address: ReceivedAddress): ReceivedAddress {
  return { email: cutToLength(address.email, emailKept), name: address.name === null ? null : cutToLength(address.name, nameKept) };
}
