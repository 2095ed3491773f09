/**
 * Realistic bounce and complaint reports, written after what Postfix, Exchange Online, Gmail, Exim,
 * qmail and Yahoo/Microsoft feedback loops send. `to` is the VERP address the report is mailed to,
 * `rcpt` the original recipient.
 */
export interface SampleParams {
  to: string;
  rcpt: string;
  messageId?: string;
}

const crlf = (text: string) => text.replace(/\r?\n/g, '\r\n');

export function postfixHardBounce({ to, rcpt, messageId = '<x@sender.test>' }: SampleParams): string {
  return crlf(`Return-Path: <>
Received: by mx.inbox.test (Postfix) id 4QdZ3L1Q7Wz9sT; Mon, 15 Jan 2024 10:00:01 +0000 (UTC)
Date: Mon, 15 Jan 2024 10:00:01 +0000 (UTC)
From: MAILER-DAEMON@mx.inbox.test (Mail Delivery System)
Subject: Undelivered Mail Returned to Sender
To: ${to}
Auto-Submitted: auto-replied
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
	boundary="4QdZ3L1Q7Wz9sT.1705312801/mx.inbox.test"
Message-Id: <20240115100001.4QdZ3L1Q7Wz9sT@mx.inbox.test>

This is a MIME-encapsulated message.

--4QdZ3L1Q7Wz9sT.1705312801/mx.inbox.test
Content-Description: Notification
Content-Type: text/plain; charset=us-ascii

This is the mail system at host mx.inbox.test.

I'm sorry to have to inform you that your message could not
be delivered to one or more recipients. It's attached below.

                   The mail system

<${rcpt}>: host store.inbox.test[10.0.0.7] said: 550 5.1.1
    <${rcpt}>: Recipient address rejected: User unknown in virtual mailbox
    table (in reply to RCPT TO command)

--4QdZ3L1Q7Wz9sT.1705312801/mx.inbox.test
Content-Description: Delivery report
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.inbox.test
X-Postfix-Queue-ID: 4QdZ3L1Q7Wz9sT
X-Postfix-Sender: rfc822; ${to}
Arrival-Date: Mon, 15 Jan 2024 10:00:00 +0000 (UTC)

Final-Recipient: rfc822; ${rcpt}
Original-Recipient: rfc822;${rcpt}
Action: failed
Status: 5.1.1
Remote-MTA: dns; store.inbox.test
Diagnostic-Code: smtp; 550 5.1.1 <${rcpt}>: Recipient address rejected: User
    unknown in virtual mailbox table

--4QdZ3L1Q7Wz9sT.1705312801/mx.inbox.test
Content-Description: Undelivered Message
Content-Type: message/rfc822

Return-Path: <${to}>
From: Sender <hello@sender.test>
To: ${rcpt}
Subject: Hello
Message-ID: ${messageId}
Date: Mon, 15 Jan 2024 09:59:59 +0000

Hello there

--4QdZ3L1Q7Wz9sT.1705312801/mx.inbox.test--
`);
}

export function postfixDelayed({ to, rcpt }: SampleParams): string {
  return crlf(`From: MAILER-DAEMON@mx.inbox.test (Mail Delivery System)
Subject: Delayed Mail (still being retried)
To: ${to}
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="DLY"

--DLY
Content-Description: Notification
Content-Type: text/plain; charset=us-ascii

This is the mail system at host mx.inbox.test.

####################################################################
# THIS IS A WARNING ONLY.  YOU DO NOT NEED TO RESEND YOUR MESSAGE. #
####################################################################

--DLY
Content-Description: Delivery report
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.inbox.test

Final-Recipient: rfc822; ${rcpt}
Action: delayed
Status: 4.4.1
Diagnostic-Code: X-Postfix; connect to store.inbox.test[10.0.0.7]:25: Connection
    timed out
Will-Retry-Until: Sat, 20 Jan 2024 10:00:00 +0000 (UTC)

--DLY--
`);
}

export function exchangeHardBounce({ to, rcpt }: SampleParams): string {
  return crlf(`From: Microsoft Outlook <postmaster@inbox.test>
To: <${to}>
Subject: Undeliverable: Hello
Content-Type: multipart/report; report-type=delivery-status;
	boundary="b0aa8a0e-8a8c-4c39-bf8a-0ef5d7b1b1a4"
MIME-Version: 1.0

--b0aa8a0e-8a8c-4c39-bf8a-0ef5d7b1b1a4
Content-Type: multipart/alternative; differences=Content-Type;
	boundary="e7b8f3c2-1c59-4d36-a0bd-86b7a3f5a1b2"

--e7b8f3c2-1c59-4d36-a0bd-86b7a3f5a1b2
Content-Type: text/plain; charset="us-ascii"
Content-Transfer-Encoding: quoted-printable

Your message to ${rcpt} couldn't be delivered.
${rcpt.split('@')[0]} wasn't found at ${rcpt.split('@')[1]}.

--e7b8f3c2-1c59-4d36-a0bd-86b7a3f5a1b2
Content-Type: text/html; charset="us-ascii"

<html><body><p>Your message to ${rcpt} couldn't be delivered.</p></body></html>

--e7b8f3c2-1c59-4d36-a0bd-86b7a3f5a1b2--

--b0aa8a0e-8a8c-4c39-bf8a-0ef5d7b1b1a4
Content-Type: message/delivery-status

Reporting-MTA: dns;AM0PR01MB1234.eurprd01.prod.exchangelabs.com
Received-From-MTA: dns;mta.sender.test
Arrival-Date: Mon, 15 Jan 2024 10:00:00 +0000

Original-Recipient: rfc822;${rcpt}
Final-Recipient: rfc822;${rcpt}
Action: failed
Status: 5.1.10
Diagnostic-Code: smtp;550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not
 found by SMTP address lookup

--b0aa8a0e-8a8c-4c39-bf8a-0ef5d7b1b1a4
Content-Type: text/rfc822-headers

From: hello@sender.test
To: ${rcpt}
Subject: Hello

--b0aa8a0e-8a8c-4c39-bf8a-0ef5d7b1b1a4--
`);
}

/**
 * Exchange Online giving up on a hop after it (an on-premises server behind a connector, a partner's
 * filter) that refused connections for its 24 hours: `550 5.4.316 Message expired, connection refused`.
 * `code` and `text` vary it over the other "Message expired" codes of that family (5.4.300, 5.4.312, ...).
 */
export function exchangeOnlineMessageExpired({ to, rcpt }: SampleParams, code = '5.4.316', text = 'Message expired, connection refused(Socket error code 10061)'): string {
  return crlf(`From: Microsoft Outlook <postmaster@inbox.test>
To: <${to}>
Subject: Undeliverable: Hello
Content-Type: multipart/report; report-type=delivery-status;
	boundary="c1aa8a0e-8a8c-4c39-bf8a-0ef5d7b1b1a4"
MIME-Version: 1.0
X-MS-Exchange-Message-Is-Ndr:
X-MS-Exchange-Organization-SCL: -1

--c1aa8a0e-8a8c-4c39-bf8a-0ef5d7b1b1a4
Content-Type: text/plain; charset="us-ascii"

Delivery has failed to these recipients or groups:

${rcpt}
The server has tried to deliver this message, without success, and has stopped trying.

Diagnostic information for administrators:

Generating server: AM0PR01MB1234.eurprd01.prod.exchangelabs.com

${rcpt}
Remote Server returned '550 ${code} ${text}'

--c1aa8a0e-8a8c-4c39-bf8a-0ef5d7b1b1a4
Content-Type: message/delivery-status

Reporting-MTA: dns;AM0PR01MB1234.eurprd01.prod.exchangelabs.com
Received-From-MTA: dns;mta.sender.test
Arrival-Date: Mon, 15 Jan 2024 10:00:00 +0000

Original-Recipient: rfc822;${rcpt}
Final-Recipient: rfc822;${rcpt}
Action: failed
Status: ${code}
Diagnostic-Code: smtp;550 ${code} ${text}

--c1aa8a0e-8a8c-4c39-bf8a-0ef5d7b1b1a4
Content-Type: text/rfc822-headers

From: hello@sender.test
To: ${rcpt}
Subject: Hello

--c1aa8a0e-8a8c-4c39-bf8a-0ef5d7b1b1a4--
`);
}

export function gmailHardBounce({ to, rcpt }: SampleParams): string {
  return crlf(`From: Mail Delivery Subsystem <mailer-daemon@googlemail.com>
To: ${to}
Auto-Submitted: auto-replied
Subject: Delivery Status Notification (Failure)
MIME-Version: 1.0
Content-Type: multipart/report; boundary="000000000000a1b2c3"; report-type=delivery-status

--000000000000a1b2c3
Content-Type: multipart/related; boundary="000000000000d4e5f6"

--000000000000d4e5f6
Content-Type: multipart/alternative; boundary="000000000000f7g8h9"

--000000000000f7g8h9
Content-Type: text/plain; charset="UTF-8"

** Address not found **

Your message wasn't delivered to ${rcpt} because the address couldn't be found, or is unable to receive mail.

The response from the remote server was:
550 5.1.1 The email account that you tried to reach does not exist.

--000000000000f7g8h9--
--000000000000d4e5f6--
--000000000000a1b2c3
Content-Type: message/delivery-status

Reporting-MTA: dns; googlemail.com
Arrival-Date: Mon, 15 Jan 2024 02:00:00 -0800 (PST)
X-Original-Message-ID: <x@sender.test>

Final-Recipient: rfc822; ${rcpt}
Action: failed
Status: 5.1.1
Remote-MTA: dns; gmail-smtp-in.l.google.com. (2a00:1450:400c:c0b::1b, the server
 for the domain gmail.com.)
Diagnostic-Code: smtp; 550-5.1.1 The email account that you tried to reach does
 not exist. Please try double-checking the recipient's email address for typos or
 unnecessary spaces. https://support.google.com/mail/?p=NoSuchUser
Last-Attempt-Date: Mon, 15 Jan 2024 02:00:01 -0800 (PST)

--000000000000a1b2c3
Content-Type: message/rfc822

From: hello@sender.test
To: ${rcpt}
Subject: Hello

Hello there
--000000000000a1b2c3--
`);
}

/**
 * Exim's classic free-form bounce: no multipart/report, the code only in the text. With `member`, the
 * recipient is an alias (or forward) and the address it expanded to failed: Exim names that address and
 * says `(generated from <recipient>)` under it (deliver.c print_address_information).
 */
export function eximTextBounce({ to, rcpt }: SampleParams, member?: string): string {
  const failed = member ?? rcpt;
  return crlf(`From: Mail Delivery System <Mailer-Daemon@mail.inbox.test>
To: ${to}
Subject: Mail delivery failed: returning message to sender
Auto-Submitted: auto-replied

This message was created automatically by mail delivery software.

A message that you sent could not be delivered to one or more of its
recipients. This is a permanent error. The following address(es) failed:

  ${failed}${member ? `
    (generated from ${rcpt})` : ''}
    host store.inbox.test [10.0.0.7]
    SMTP error from remote mail server after RCPT TO:<${failed}>:
    550 5.1.1 User unknown

------ This is a copy of the message, including all the headers. ------

From: hello@sender.test
To: ${rcpt}
Subject: Hello

Hello there
`);
}

/**
 * Postfix, a later hop refusing the message (not the address) at end of DATA with a bare reply code: the
 * DSN says `Status: 5.0.0` and its Diagnostic-Code the reply alone; only the text says at which command.
 */
export function postfixRefusedAtEndOfData({ to, rcpt }: SampleParams): string {
  return crlf(`From: MAILER-DAEMON@mx.inbox.test (Mail Delivery System)
Subject: Undelivered Mail Returned to Sender
To: ${to}
Auto-Submitted: auto-replied
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
	boundary="5RbX8c2Lk1z9sT.1705312801/mx.inbox.test"

--5RbX8c2Lk1z9sT.1705312801/mx.inbox.test
Content-Description: Notification
Content-Type: text/plain; charset=us-ascii

This is the mail system at host mx.inbox.test.

I'm sorry to have to inform you that your message could not
be delivered to one or more recipients. It's attached below.

                   The mail system

<${rcpt}>: host filter.inbox.test[10.0.0.9] said: 554 Message rejected as
    spam (in reply to end of DATA command)

--5RbX8c2Lk1z9sT.1705312801/mx.inbox.test
Content-Description: Delivery report
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.inbox.test
X-Postfix-Queue-ID: 5RbX8c2Lk1z9sT
Arrival-Date: Mon, 15 Jan 2024 10:00:00 +0000 (UTC)

Final-Recipient: rfc822; ${rcpt}
Original-Recipient: rfc822;${rcpt}
Action: failed
Status: 5.0.0
Remote-MTA: dns; filter.inbox.test
Diagnostic-Code: smtp; 554 Message rejected as spam

--5RbX8c2Lk1z9sT.1705312801/mx.inbox.test
Content-Description: Undelivered Message
Content-Type: message/rfc822

From: Sender <hello@sender.test>
To: ${rcpt}
Subject: Hello

Hello there

--5RbX8c2Lk1z9sT.1705312801/mx.inbox.test--
`);
}

/**
 * Exim's DSN for the same refusal: the text says `SMTP error from remote mail server after end of data`,
 * the Diagnostic-Code carries the reply without that prefix (Exim's print_dsn_diagnostic_code).
 */
export function eximRefusedAtEndOfData({ to, rcpt }: SampleParams): string {
  return eximReport({ to, rcpt }, ['host filter.inbox.test [10.0.0.9]', 'SMTP error from remote mail server after end of data:', '550 Message rejected as spam'], {
    host: 'filter.inbox.test',
    reply: '550 Message rejected as spam',
  });
}

/**
 * Exim giving up on a recipient whose host kept answering with a bare 4xx (no enhanced code) until its
 * retry rules timed out. Exim writes `Status: 5.0.0` for every failure; the Diagnostic-Code holds the
 * last reply, here Exim's own `451 Temporary local problem - please try later`.
 */
export function eximRetryTimeout({ to, rcpt }: SampleParams, reply = '451 Temporary local problem - please try later'): string {
  return eximReport({ to, rcpt }, ['host mx.inbox.test [10.0.0.7]', `SMTP error from remote mail server after RCPT TO:<${rcpt}>:`, `${reply}: retry timeout exceeded`], {
    host: 'mx.inbox.test',
    reply,
  });
}

/**
 * Exim failing a recipient without a host's reply (no Diagnostic-Code: Exim writes one only for a reply):
 * `Status: 5.0.0`, the reason only in the text. By default a local delivery whose retries of a full
 * mailbox timed out; `reason` gives another, such as hosts that never answered.
 */
export function eximFailedWithoutReply({ to, rcpt }: SampleParams, reason = `mailbox is full (MTA-imposed quota exceeded while writing to file /var/mail/${rcpt.split('@')[0]}): retry timeout exceeded`): string {
  return eximReport({ to, rcpt }, [reason]);
}

/**
 * Exim's report when the email's recipient is an alias and one address it expands to failed: the text
 * names that member with `(generated from <alias>)` under it, while the DSN's Final-Recipient is the alias
 * itself, as Exim writes the top ancestor there (deliver.c print_dsn_addr_action).
 */
export function eximAliasMemberFailed({ to, rcpt }: SampleParams, member = 'ann.leaver@elsewhere.test'): string {
  const reply = '550 5.1.1 User unknown';
  const failure = [`(generated from ${rcpt})`, 'host mx.elsewhere.test [10.0.0.8]', `SMTP error from remote mail server after RCPT TO:<${member}>:`, reply];
  return eximReport({ to, rcpt }, failure, { host: 'mx.elsewhere.test', reply }, member);
}

/**
 * Exim's report when a pipe in the recipient's alias (a helpdesk's intake script) failed: the text says
 * `pipe to |…` and `generated by <alias>`, no host replied, and the DSN names the alias with Status 5.0.0.
 */
export function eximAliasPipeFailed({ to, rcpt }: SampleParams): string {
  return eximReport({ to, rcpt }, [`generated by ${rcpt}`, 'local delivery failed'], undefined, 'pipe to |/usr/local/bin/helpdesk-intake');
}

/**
 * Exim's bounce report for one failed recipient: `failure` is the text's lines under the address; `remote`,
 * the host and its reply, when one answered (Remote-MTA and Diagnostic-Code). Status is always 5.0.0.
 * `failed`: the address the text names, when not the recipient (an alias's member); the DSN names the recipient.
 */
function eximReport({ to, rcpt }: SampleParams, failure: string[], remote?: { host: string; reply: string }, failed = rcpt): string {
  const boundary = '1705312801-eximdsn-846930886';
  const remoteFields = remote ? `\nRemote-MTA: dns; ${remote.host}\nDiagnostic-Code: smtp; ${remote.reply}` : '';
  return crlf(`From: Mail Delivery System <Mailer-Daemon@mail.inbox.test>
To: ${to}
Content-Type: multipart/report; report-type=delivery-status; boundary=${boundary}
MIME-Version: 1.0
Subject: Mail delivery failed: returning message to sender
Auto-Submitted: auto-replied

This is a MIME-formatted message.  If you see this text it means that your
E-mail software does not support MIME-formatted messages.

--${boundary}
Content-type: text/plain; charset=us-ascii

This message was created automatically by mail delivery software.

A message that you sent could not be delivered to one or more of its
recipients. This is a permanent error. The following address(es) failed:

  ${failed}
${failure.map((line) => `    ${line}`).join('\n')}

--${boundary}
Content-type: message/delivery-status

Reporting-MTA: dns; mail.inbox.test

Action: failed
Final-Recipient: rfc822;${rcpt}
Status: 5.0.0${remoteFields}

--${boundary}
Content-type: message/rfc822

From: hello@sender.test
To: ${rcpt}
Subject: Hello

Hello there

--${boundary}--
`);
}

/** qmail: only a basic reply code in the text, original after the marker. */
export function qmailTextBounce({ to, rcpt }: SampleParams): string {
  return crlf(`From: MAILER-DAEMON@mail.inbox.test
To: ${to}
Subject: failure notice

Hi. This is the qmail-send program at mail.inbox.test.
I'm afraid I wasn't able to deliver your message to the following addresses.
This is a permanent error; I've given up. Sorry it didn't work out.

<${rcpt}>:
10.0.0.7 does not like recipient.
Remote host said: 554 delivery error: dd This user doesn't have an account
Giving up on 10.0.0.7.

--- Below this line is a copy of the message.

Return-Path: <${to}>
Subject: Hello

Hello there
`);
}

/**
 * Not bounces, though they read like one. A helpdesk that answers the recipient's postmaster mailbox
 * acknowledging the email as a ticket: an RFC 3834 auto-reply, sent with <> to the Return-Path, from
 * postmaster, with a phrase MTAs use and a street number opening a line of its signature.
 */
export function postmasterHelpdeskAutoReply(to: string): string {
  return crlf(`From: Northwind IT Helpdesk <postmaster@northwind.test>
To: ${to}
Subject: Your request has been received [#48213]
Auto-Submitted: auto-replied
X-Auto-Response-Suppress: All
Precedence: bulk
MIME-Version: 1.0
Content-Type: text/plain; charset=utf-8

Thank you for writing to the Northwind postmaster. Ticket #48213 has been
opened and we will answer within one working day.

If you reported "user unknown" errors, please reply with the full bounce.

Northwind Traders IT
550 Main St, Suite 200
Springfield, IL 62701
`);
}

/** A carrier's notice from a named sender (not <>) to the Return-Path, its subject reading like a bounce. */
export function parcelNotice(to: string): string {
  return crlf(`From: Parcel Desk <parcels@shop.test>
To: ${to}
Subject: Your parcel could not be delivered
MIME-Version: 1.0
Content-Type: text/plain; charset=utf-8

We tried to deliver parcel 4471 today, but nobody was home.
Collect it within 7 days from our depot:
550 Main St
Springfield, IL 62701
`);
}

/** An RFC 5965 complaint as Yahoo's and Microsoft's feedback loops send it. */
export function arfComplaint({ to, rcpt, messageId = '<x@sender.test>' }: SampleParams, feedbackType = 'abuse'): string {
  return crlf(`From: feedback@arf.mail.yahoo.com
To: ${to}
Subject: FW: Hello
Date: Mon, 15 Jan 2024 11:00:00 +0000
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report;
     boundary="----=_Part_ARF"

------=_Part_ARF
Content-Type: text/plain; charset="US-ASCII"
Content-Transfer-Encoding: 7bit

This is an email abuse report for an email message received from IP
192.0.2.1 on Mon, 15 Jan 2024 10:00:00 +0000.

------=_Part_ARF
Content-Type: message/feedback-report

Feedback-Type: ${feedbackType}
User-Agent: Yahoo!-Mail-Feedback/2.0
Version: 1
Original-Mail-From: <${to}>
Original-Rcpt-To: <${rcpt}>
Arrival-Date: Mon, 15 Jan 2024 10:00:00 +0000
Source-IP: 192.0.2.1
Reported-Domain: sender.test

------=_Part_ARF
Content-Type: message/rfc822

Return-Path: <${to}>
From: hello@sender.test
To: ${rcpt}
Subject: Hello
Message-ID: ${messageId}

Hello there
------=_Part_ARF--
`);
}

/**
 * Gmail's DSN for mail it relayed (a Workspace forward) to a Yahoo/AOL-hosted address that does not
 * exist: Yahoo's mail hosts answer a missing mailbox with a bare `552 1 Requested mail action aborted,
 * mailbox not found`, and Gmail reports it with the generic Status 5.0.0.
 */
export function gmailRelayedYahooMailboxNotFound({ to, rcpt }: SampleParams): string {
  return crlf(`From: Mail Delivery Subsystem <mailer-daemon@googlemail.com>
To: ${to}
Auto-Submitted: auto-replied
Subject: Delivery Status Notification (Failure)
MIME-Version: 1.0
Content-Type: multipart/report; boundary="00000000000052a1c0"; report-type=delivery-status

--00000000000052a1c0
Content-Type: text/plain; charset="UTF-8"

** Address not found **

Your message wasn't delivered to ${rcpt} because the address couldn't be found, or is unable to receive mail.

The response from the remote server was:
552 1 Requested mail action aborted, mailbox not found

--00000000000052a1c0
Content-Type: message/delivery-status

Reporting-MTA: dns; googlemail.com
Received-From-MTA: dns; mta.sender.test
Arrival-Date: Mon, 15 Jan 2024 02:00:00 -0800 (PST)

Final-Recipient: rfc822; ${rcpt}
Action: failed
Status: 5.0.0
Remote-MTA: dns; mx-aol.mail.gm0.yahoodns.net. (67.195.204.72, the server for
 the domain inbox.test.)
Diagnostic-Code: smtp; 552 1 Requested mail action aborted, mailbox not found
Last-Attempt-Date: Mon, 15 Jan 2024 02:00:02 -0800 (PST)

--00000000000052a1c0
Content-Type: text/rfc822-headers

From: hello@sender.test
To: ${rcpt}
Subject: Hello

--00000000000052a1c0--
`);
}

/**
 * Feedback-loop reports mailed to the address the sender registered with the provider (postmaster@ one of
 * its domains), not to the VERP Return-Path: `returnPath` is the VERP address the original went out with.
 * Yahoo's CFL (AOL's too) names it in `Original-Mail-From` and returns the original as message/rfc822.
 */
export function yahooCflComplaint({ to, returnPath, messageId = '<x@sender.test>' }: { to: string; returnPath: string; messageId?: string }): string {
  return crlf(`From: Yahoo! Mail AntiSpam Feedback <feedback@arf.mail.yahoo.com>
To: ${to}
Subject: FW: Hello
Date: Mon, 15 Jan 2024 11:00:00 +0000
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report;
     boundary="----=_Part_CFL"

------=_Part_CFL
Content-Type: text/plain; charset="US-ASCII"
Content-Transfer-Encoding: 7bit

This is an email abuse report for an email message received from IP
192.0.2.1 on Mon, 15 Jan 2024 10:00:00 +0000.

------=_Part_CFL
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: Yahoo!-Mail-Feedback/2.0
Version: 1
Original-Mail-From: <${returnPath}>
Original-Rcpt-To: <redacted>
Arrival-Date: Mon, 15 Jan 2024 10:00:00 +0000
Source-IP: 192.0.2.1
Reported-Domain: sender.test

------=_Part_CFL
Content-Type: message/rfc822

Return-Path: <${returnPath}>
Received: from mail.sender.test (192.0.2.1) by mta1.mail.yahoo.com; Mon, 15 Jan 2024 10:00:00 +0000
From: hello@sender.test
To: redacted
Subject: Hello
Message-ID: ${messageId}

Hello there
------=_Part_CFL--
`);
}

/**
 * Microsoft's JMRP: no Original-Mail-From, the recipient redacted, the original returned inline as
 * RFC 5965's own example does (`Content-Disposition: inline`) with the Return-Path its MX added; with
 * `headersOnly`, only the original's header block (text/rfc822-headers, RFC 5965 §2 allows it).
 */
export function microsoftJmrpComplaint({ to, returnPath, messageId = '<x@sender.test>' }: { to: string; returnPath: string; messageId?: string }, headersOnly = false): string {
  const original = `X-HmXmrOriginalRecipient: <redacted>
X-Reporter-IP: 198.51.100.7
Received: from mail.sender.test (192.0.2.1) by MW2NAM.outbound.protection.outlook.com; Mon, 15 Jan 2024 10:00:00 +0000
Authentication-Results: spf=pass (sender IP is 192.0.2.1) smtp.mailfrom=bounce.sender.test
Return-Path: ${returnPath}
From: hello@sender.test
To: <redacted>
Subject: Hello
Message-ID: ${messageId}
`;
  return crlf(`From: staff@hotmail.com
To: ${to}
Subject: complaint about message from 192.0.2.1
Date: Mon, 15 Jan 2024 11:00:00 -0800
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report; boundary="07DAB6B3-2C8D-4B70-B05E-9F9B4DB0D3E4"

--07DAB6B3-2C8D-4B70-B05E-9F9B4DB0D3E4
Content-Type: text/plain; charset="us-ascii"
Content-Transfer-Encoding: 7bit

This is an email abuse report for an email message received from IP 192.0.2.1 on Mon, 15 Jan 2024 10:00:00 -0800.
For more information about this format please see http://www.mipassoc.org/arf/.

--07DAB6B3-2C8D-4B70-B05E-9F9B4DB0D3E4
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: Hotmail FBL
Version: 0.1
Received-Date: Mon, 15 Jan 2024 10:00:00 -0800
Source-IP: 192.0.2.1

--07DAB6B3-2C8D-4B70-B05E-9F9B4DB0D3E4
${headersOnly ? 'Content-Type: text/rfc822-headers' : 'Content-Type: message/rfc822\nContent-Disposition: inline'}

${headersOnly ? original : `${original}\nHello there\n`}
--07DAB6B3-2C8D-4B70-B05E-9F9B4DB0D3E4--
`);
}
