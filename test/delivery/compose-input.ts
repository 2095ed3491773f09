import type { ComposeInput } from '../../src/delivery/compose.js';

/** A stored email as composition takes it: plain, no optional field set (tests override what they need). */
export const sampleComposeInput: ComposeInput = {
  emailId: '0123456789abcdef01234567',
  toAddress: 'alice@inbox.test',
  fromAddress: 'hello@sender.test',
  fromName: null,
  replyToAddress: null,
  replyToName: null,
  subject: 'Hello',
  html: null,
  text: null,
  headers: null,
  messageId: null,
  attachments: [],
  date: new Date('2026-11-22T10:00:00Z'),
};
