/**
 * The `To:` and `Cc:` lists of a submitted message (SMTP submission), kept so that every copy shows them
 * as the app wrote them, as any MTA delivers a message: recipients see who else it went to and
 * reply-all reaches them. The email record still has one recipient (its `toAddress`, the RCPT); Bcc
 * recipients are in no list, so they stay hidden. The send API has no such field.
 */
export interface HeaderRecipients {
  to: HeaderAddress[];
  cc: HeaderAddress[];
  /**
   * A Reply-To of several addresses (RFC 5322 §3.6.2: an address list), written as it came; the email
   * record's `replyToAddress` holds its first. Absent for one address or none.
   */
  replyTo?: HeaderAddress[];
}

export interface HeaderAddress {
  /** The display name, decoded ('' for none). */
  name: string;
  address: string;
}
