import { smtpListener, type SmtpListener } from './listener.js';
import type { SMTPServerDataStream, SMTPServerSession } from 'smtp-server';
import { isValidAddress, withAsciiDomain } from '../emails/address.js';
import { attachmentContentType, type AttachedMessage } from '../emails/attachments.js';
import type { HeaderRecipients } from '../emails/header-recipients.js';
import type { SendEmailInput } from '../emails/schemas.js';
import { minRemoteKeyLength, type AuthenticatedProject } from '../projects/keys.js';
import { isLoopbackAddress } from '../lib/private-address.js';
import { AppError, isAppError, isStorageFull } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import type { MemoryBudget } from '../lib/memory-budget.js';
import type { InlineImage } from '../render/types.js';
import { createBudgetedReader, type MessageSpool } from './message-spool.js';
import { createSessionsPerAddress, maxSessionsPerAddress, maxSessionsPerListener, smtpCloseTimeoutMs, smtpIdleTimeoutMs } from './session-limits.js';
import { SubmissionSmtpServer, type SubmissionServerOptions } from './submission-server.js';
import { isSmtpReply, smtpError, spoolFailure, toSmtpError } from './smtp-replies.js';
import { parseMessage } from './parse-message.js';
import { buildSendInputs } from './submission-message.js';

export interface SubmissionOptions {
  host: string;
  port: number;
  hostname: string;
  maxMessageBytes: number;
  tls: { key: string; cert: string };
  /** AUTH before STARTTLS (tests only; the API key would cross the wire in clear). */
  allowInsecureAuth: boolean;
  /** Keep smtp-server's 100 ms early-talker wait (false: greet at once, see submission-server.ts). */
  greetingDelay: boolean;
  /** `Authorization`-style check of the API key; throws AppError when it is not valid. */
  authenticate(authorization: string): AuthenticatedProject;
  /** Shared with the API's request bodies: a message waits for room before it is parsed. */
  memoryBudget?: MemoryBudget;
  /** Where messages are kept between their final dot and their parsing. */
  spool: MessageSpool;
  /**
   * The send pipeline; one call per message, all recipients at once so a message is all-or-nothing.
   * `messageId`: the message's own, when it has a usable one; `headerRecipients`: its To/Cc lists;
   * `attachedMessages`: the emails it forwards. Every copy keeps them, as any MTA does.
   */
  send(
    projectId: string,
    inputs: SendEmailInput[],
    inlineImages: InlineImage[],
    message: { messageId: string | undefined; headerRecipients: HeaderRecipients | undefined; attachedMessages: AttachedMessage[] },
  ): Promise<unknown>;
  log: Logger;
}

export type SubmissionSmtp = SmtpListener;

/** What an authenticated session keeps: its project, and the key to check again before each message. */
interface SessionUser {
  projectId: string;
  authorization: string;
}

/**
 * A wrong key is answered after this wait (Postfix's smtpd_error_sleep_time), and the session closed at
 * the third (RFC 4954 §4 lets a server limit failed attempts): 30 guesses took 24 ms on one connection.
 */
export const failedAuthDelayMs = 1_000;
export const failedAuthsPerSession = 3;

/** RFC 5321 §4.5.3.1.8 requires accepting 100 recipients; 50 is the batch size of the send API (452 asks for the rest later). */
export const maxRecipients = 50;

/**
 * The submission listener for apps that only speak SMTP: STARTTLS, AUTH PLAIN/LOGIN with an API key as
 * the password (any username), one email per RCPT through the same send pipeline as the HTTP API.
 */
export function createSubmissionSmtp(options: SubmissionOptions): SubmissionSmtp {
  const sessionsPerAddress = createSessionsPerAddress(maxSessionsPerAddress);
  const reader = createBudgetedReader(options.spool, options.memoryBudget);
  const failedAuths = new Map<string, number>();
  const serverOptions: SubmissionServerOptions = {
    greetingDelay: options.greetingDelay,
    name: options.hostname || undefined,
    banner: 'Postino submission', // smtp-server writes "220 <name> ESMTP <banner>"
    size: options.maxMessageBytes,
    maxClients: maxSessionsPerListener,
    closeTimeout: smtpCloseTimeoutMs,
    socketTimeout: smtpIdleTimeoutMs,
    key: options.tls.key,
    cert: options.tls.cert,
    authMethods: ['PLAIN', 'LOGIN'],
    // Recipients must be ASCII (the send API's toAddress rule), so SMTPUTF8 is not offered.
    hideSMTPUTF8: true,
    authOptional: false,
    // smtp-server's own "Error: authentication Required" names no cause: a client that skipped STARTTLS
    // (ignoreTLS against a self-signed certificate) never saw AUTH listed, so its credentials went unused
    // without a word. RFC 4954 §6: 530 5.7.0; the text says how to get past it.
    // One text for every session (smtp-server's is fixed): it must hold for an encrypted one too.
    authRequiredMessage: options.allowInsecureAuth
      ? '5.7.0 Authentication required: AUTH with an API key as the password'
      : '5.7.0 Authentication required: AUTH with an API key as the password (AUTH is offered only after STARTTLS)',
    allowInsecureAuth: options.allowInsecureAuth,
    disableReverseLookup: true,
    logger: false,
    // A host without a key must not hold every session of the listener (the inbound port's trickle,
    // session-limits.ts); an app may open many once they authenticate, so only those waiting to count.
    onConnect: (session, callback) => sessionsPerAddress.onConnect(session, callback),
    onClose(session) {
      sessionsPerAddress.release(session.id, session.remoteAddress);
      failedAuths.delete(session.id);
      reader.sessionClosed(session.id);
    },
    onAuth(auth, session, callback) {
      if (!session.secure && !options.allowInsecureAuth) return callback(smtpError(538, '5.7.11 Encryption required: use STARTTLS first'));
      try {
        const password = auth.password ?? '';
        const authorization = `Bearer ${password}`;
        // A configured short key (a sandbox's `test`) would be guessed in seconds from other machines: the
        // listener binds every interface by default, and the HTTP API's length rule sees only its own bind.
        // The key as authenticate reads it (spaces around it are tolerated): padded, a short one passed the length.
        if (password.trim().length < minRemoteKeyLength && !isLoopbackAddress(session.remoteAddress)) {
          options.log.info('submission auth refused: a key this short authenticates from loopback only', { remoteAddress: session.remoteAddress });
          throw new AppError('authentication-failed', 'A key this short authenticates from loopback only.');
        }
        const project = options.authenticate(authorization);
        sessionsPerAddress.release(session.id, session.remoteAddress);
        callback(null, { user: { projectId: project.id, authorization } satisfies SessionUser });
      } catch (error) {
        if (!isAppError(error)) {
          // Not the key's fault (the database, for one): RFC 4954 §6 says try again, not "wrong key".
          options.log.error('submission auth could not be checked', { error, remoteAddress: session.remoteAddress });
          return callback(smtpError(454, '4.7.0 Temporary authentication failure, try again later'));
        }
        // Not the user name: any is accepted, so clients put the API key there too, and a key must never
        // reach the log (DESIGN.md convention 10).
        options.log.info('submission auth failed', { remoteAddress: session.remoteAddress });
        const failures = (failedAuths.get(session.id) ?? 0) + 1;
        failedAuths.set(session.id, failures);
        const answer =
          failures >= failedAuthsPerSession
            ? smtpError(421, `4.7.0 Authentication failed ${failures} times: closing the connection`)
            : smtpError(535, '5.7.8 Authentication failed: the password must be a valid API key');
        setTimeout(() => callback(answer), failedAuthDelayMs).unref();
      }
    },
    onMailFrom(_address, session, callback) {
      try {
        stillAuthorized(session);
        callback();
      } catch (error) {
        callback(toSmtpError(error));
      }
    },
    onRcptTo(address, session, callback) {
      if (session.envelope.rcptTo.length >= maxRecipients) return callback(smtpError(452, `4.5.3 Too many recipients (at most ${maxRecipients} per message)`));
      // Each recipient becomes an email of its own: refusing a bad one here lets the others go (at DATA
      // it would fail the whole message).
      callback(recipientProblem(withAsciiDomain(address.address)));
    },
    onData(stream, session, callback) {
      void receive(stream, session).then(
        (reply) => {
          if (reply !== undefined) callback(null, reply);
        },
        (error) => {
          // A refusal of the input is the client's business; a full disk is an outage, said per refusal at
          // warn as the API does (http/errors.ts); anything else is ours and must be visible.
          if (isStorageFull(error)) options.log.warn('storage full: submission refused', { remoteAddress: session.remoteAddress, error: (error as Error).message });
          else if (!isAppError(error) && !isSmtpReply(error)) options.log.error('submission failed', { error, remoteAddress: session.remoteAddress });
          callback(toSmtpError(error));
        },
      );
    },
  };

  /** The 250 text for a message; `undefined` when its client went away before it could be answered. */
  const receive = async (stream: SMTPServerDataStream, session: SMTPServerSession): Promise<string | undefined> => {
    const outcome = await reader.read(stream, session.id, (raw) => submit(raw, session));
    if (outcome.kind === 'aborted') return undefined;
    if (outcome.kind === 'too-large') throw new AppError('payload-too-large', 'Message exceeds the maximum size');
    if (outcome.kind === 'storage-failed') {
      options.log.error('submission could not spool a message', { error: outcome.error, remoteAddress: session.remoteAddress });
      throw spoolFailure(outcome.error);
    }
    return outcome.value;
  };

  /**
   * The session's project, as long as the key it authenticated with is still valid: a pooled connection
   * (nodemailer keeps one for up to 100 messages) went on sending for hours after its key was revoked.
   * Cached lookups (projects/service.ts), so a check per message costs next to nothing.
   */
  const stillAuthorized = (session: SMTPServerSession): string => {
    const user = session.user as SessionUser;
    try {
      return options.authenticate(user.authorization).id;
    } catch (error) {
      if (!isAppError(error)) throw error;
      throw new AppError('authentication-required', 'The API key this session authenticated with has been revoked: authenticate again with a valid key.');
    }
  };

  const submit = async (raw: Buffer, session: SMTPServerSession): Promise<string> => {
    // A text file the send API could not carry (`.log`, `.md`) stays text, as it was before named text
    // parts became files: the message goes out rather than being refused for an extension.
    const parsed = await parseMessage(raw, { textPartIsFile: (name) => attachmentContentType(name) !== undefined });
    const projectId = stillAuthorized(session);
    const envelope = { mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : '', rcptTo: session.envelope.rcptTo.map((r) => withAsciiDomain(r.address)) };
    if (envelope.rcptTo.length === 0) throw new AppError('parameters-invalid', 'No recipients.');
    const { inputs, inlineImages, attachedMessages, headerRecipients } = buildSendInputs(parsed, envelope);
    // Said in the client's terms: the API's own message names fields (templateId, html) SMTP has no word for.
    if (inputs.every((input) => !input.templateId && !input.templateName && input.markdown === undefined && !input.html && !input.text)) {
      throw new AppError('parameters-invalid', 'The message has no body: send a text or an html part (or a template header).');
    }
    const message = { messageId: usableMessageId(parsed.messageId), headerRecipients, attachedMessages };
    const results = (await options.send(projectId, inputs, inlineImages, message).catch(inMessageTerms)) as { id?: string; status?: string }[];
    const ids = results.map((r) => r.id).filter((id): id is string => Boolean(id));
    options.log.info('submission accepted', { projectId, recipients: envelope.rcptTo.length, ids });
    // Recorded, but never sent: the sender should hear it, as the API's answer says (`suppressed: true`).
    const suppressed = envelope.rcptTo.filter((_, i) => results[i]?.status === 'suppressed');
    return acceptedReply(ids, suppressed);
  };

  const server = new SubmissionSmtpServer(serverOptions);
  // A listen error (a busy port) fails the start, which says so itself; a client's error is only that.
  server.on('error', (error) => {
    if ((error as NodeJS.ErrnoException).syscall !== 'listen') options.log.warn('submission connection error', { error: (error as Error).message });
  });

  return smtpListener(server, options.host, options.port, 'submission');
}

/**
 * The 250 text: the ids of the emails made, and the suppressed recipients. A reply line holds at most
 * 512 octets (RFC 5321 §4.5.3.1.5), and 50 ids alone take 1,250: past that, counts and the id range (ids
 * sort in creation order).
 */
export function acceptedReply(ids: string[], suppressed: string[]): string {
  const note = suppressed.length > 0 ? ` (not sent to suppressed ${suppressed.join(', ')})` : '';
  const full = `2.0.0 Accepted ${ids.join(' ')}${note}`.trim();
  if (Buffer.byteLength(full) <= maxReplyText) return full;
  const range = ids.length > 1 ? `${ids.length} emails, ${ids[0]} to ${ids[ids.length - 1]}` : ids.join(' ');
  const shortNote = suppressed.length > 0 ? ` (not sent to ${suppressed.length} suppressed recipient(s))` : '';
  return `2.0.0 Accepted ${range}${shortNote}`;
}

/** 512 octets less "250 " and CRLF, with room to spare. */
const maxReplyText = 480;

/**
 * The submitted Message-ID when it is one (RFC 5322 §3.6.4 msg-id: `<id-left@id-right>`, each a
 * dot-atom-text, or a domain literal on the right), within a header line's length; otherwise delivery
 * gives the message one of its own. Parentheses or quotes are comments and quoted strings to a parser,
 * which reads `<a(b)c@x>` as `<a`: replies would not thread.
 */
export function usableMessageId(messageId: string | undefined): string | undefined {
  const value = messageId?.trim();
  return value && value.length <= 250 && msgId.test(value) ? value : undefined;
}

const atext = "[A-Za-z0-9!#$%&'*+\\-/=?^_`{|}~]+";
const dotAtom = `${atext}(?:\\.${atext})*`;
const msgId = new RegExp(`^<${dotAtom}@(?:${dotAtom}|\\[[\\x21-\\x5a\\x5e-\\x7e]*\\])>$`);

/**
 * The send pipeline words its refusals for HTTP: "Invalid body." (the request body), or "batch item 0:"
 * when the message has several recipients (they go as a batch). Over SMTP neither means anything; the
 * copies differ only in their recipient, each checked at RCPT, so a refusal is about the message.
 */
function inMessageTerms(error: unknown): never {
  if (!isAppError(error)) throw error;
  const message = error.message.replace(/^Invalid (?:body|batch item \d+)\. /, 'Invalid message. ').replace(/^batch item \d+: /, '');
  throw message === error.message ? error : new AppError(error.code, message, error.details);
}

/** RFC 5321 §4.2.2 / RFC 3463: 553 5.1.3 for a malformed mailbox, 5.6.7 for one that needs SMTPUTF8. */
function recipientProblem(address: string): Error | undefined {
  if (isValidAddress(address)) return undefined;
  if (/[^\x00-\x7f]/.test(address)) return smtpError(553, '5.6.7 Non-ASCII recipient addresses are not supported');
  return smtpError(553, '5.1.3 Recipient address is not a valid email address');
}
