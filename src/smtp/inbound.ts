import { SMTPServer, type SMTPServerDataStream, type SMTPServerOptions } from 'smtp-server';
import { smtpListener, type SmtpListener } from './listener.js';
import { isAppError, isStorageFull } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { createSessionsPerAddress, maxSessionsPerAddress, maxSessionsPerListener, smtpCloseTimeoutMs, smtpIdleTimeoutMs } from './session-limits.js';
import { smtpError, spoolFailure, toSmtpError } from './smtp-replies.js';
import type { MemoryBudget } from '../lib/memory-budget.js';
import { createBudgetedReader, type MessageSpool } from './message-spool.js';

export interface InboundSmtpOptions {
  host: string;
  port: number;
  hostname: string;
  maxMessageBytes: number;
  /** STARTTLS key and certificate; absent = STARTTLS not offered. */
  tls?: { key: string; cert: string };
  log: Logger;
  /**
   * Decides a recipient at RCPT time: the signed VERP addresses of emails the appliance sent (bounces and
   * complaints, `bounces/service.ts`), the addresses inbound routes take (`inbound/recipients.ts`); any
   * other is refused with 550, so senders get an honest permanent answer. `accepted`: the transaction's
   * recipients so far.
   */
  checkRecipient?: (address: string, accepted: string[]) => Promise<{ accept: true } | { accept: false; code: number; message: string }>;
  /**
   * Recipients per transaction; past it RCPT is answered 452 4.5.3 (RFC 5321 §4.5.3.1.10), so the sender
   * delivers the rest in another transaction instead of having them accepted and not processed.
   */
  maxRecipients?: number;
  /**
   * Stores one accepted message (`raw`, whole); throwing answers 451 so the sender retries.
   */
  receive?: (raw: Buffer, envelope: InboundEnvelope) => Promise<void>;
  /**
   * A message is read whole (inbound routes store it), into a file of the spool when it is large, and
   * handed to `receive` once the memory budget has room for it, as on the submission port (message-spool.ts).
   */
  spool: MessageSpool;
  memoryBudget?: MemoryBudget;
  /** Refused recipients answered at once, and in all per session (`defaultRefusedRecipients`); tests shorten them. */
  refusedRecipients?: RefusedRecipientLimits;
}

export interface RefusedRecipientLimits {
  answeredAtOnce: number;
  perSession: number;
  delayMs: number;
}

export type InboundSmtp = SmtpListener;

/**
 * Refused recipients a session gets answered at once, and in all (Postfix's smtpd_soft_error_limit and
 * smtpd_hard_error_limit, with a wider hard limit): past the first, each refusal waits a second, and
 * past the last the session is closed. 10,000 addresses were probed in 0.56 s in one session, which
 * lists a domain's routed addresses. A list server delivering to many unknown addresses still gets
 * through (a command may take 5 minutes, RFC 5321 §4.5.3.2).
 */
export const defaultRefusedRecipients: RefusedRecipientLimits = { answeredAtOnce: 10, perSession: 100, delayMs: 1_000 };

export interface InboundEnvelope {
  mailFrom: string;
  rcptTo: string[];
  remoteAddress: string;
  /** The name the client gave in EHLO/HELO. */
  helo: string;
  /** RFC 3848 "with" keyword: SMTP (HELO), ESMTP (EHLO), ESMTPS (EHLO and STARTTLS). */
  protocol: string;
  size: number;
}

export function createInboundSmtp(options: InboundSmtpOptions): InboundSmtp {
  const reader = createBudgetedReader(options.spool, options.memoryBudget);
  const sessionsPerAddress = createSessionsPerAddress(maxSessionsPerAddress);
  const refusedRecipients = new Map<string, number>();
  const refusedLimits = options.refusedRecipients ?? defaultRefusedRecipients;
  const serverOptions: SMTPServerOptions = {
    name: options.hostname || undefined,
    banner: 'Postino', // smtp-server writes "220 <name> ESMTP <banner>"
    size: options.maxMessageBytes,
    maxClients: maxSessionsPerListener,
    closeTimeout: smtpCloseTimeoutMs,
    socketTimeout: smtpIdleTimeoutMs,
    // Opportunistic STARTTLS with the appliance's certificate (tls-cert.ts). Without one, none is offered:
    // smtp-server's built-in fallback is an expired certificate whose private key ships in the package.
    ...(options.tls ? { key: options.tls.key, cert: options.tls.cert } : { hideSTARTTLS: true }),
    authOptional: true,
    disabledCommands: ['AUTH'],
    disableReverseLookup: true,
    logger: false,
    onConnect: (session, callback) => sessionsPerAddress.onConnect(session, callback),
    onClose(session) {
      sessionsPerAddress.release(session.id, session.remoteAddress);
      refusedRecipients.delete(session.id);
      reader.sessionClosed(session.id);
    },
    onRcptTo(address, session, callback) {
      const refusals = refusedRecipients.get(session.id) ?? 0;
      if (refusals >= refusedLimits.perSession) {
        return callback(smtpError(421, `4.7.0 ${refusals} recipients refused in this session: closing the connection`));
      }
      const refuse = (code: number, message: string) => {
        refusedRecipients.set(session.id, refusals + 1);
        const answer = () => callback(smtpError(code, message));
        if (refusals + 1 > refusedLimits.answeredAtOnce) setTimeout(answer, refusedLimits.delayMs).unref();
        else answer();
      };
      if (options.maxRecipients !== undefined && session.envelope.rcptTo.length >= options.maxRecipients) {
        return callback(smtpError(452, '4.5.3 Too many recipients, send the rest in another transaction'));
      }
      const check = options.checkRecipient ?? defaultRefuse;
      check(
        address.address,
        session.envelope.rcptTo.map((r) => r.address),
      ).then(
        (verdict) => (verdict.accept ? callback() : refuse(verdict.code, verdict.message)),
        (error) => {
          options.log.error('recipient check failed', { error });
          callback(smtpError(451, '4.3.0 Temporary failure, try again later'));
        },
      );
    },
    onData(stream, session, callback) {
      const envelope = () => ({
        mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
        rcptTo: session.envelope.rcptTo.map((r) => r.address),
        remoteAddress: session.remoteAddress,
        helo: session.hostNameAppearsAs ?? '',
        protocol: withProtocol(session.transmissionType, (session.envelope as { smtpUtf8?: boolean }).smtpUtf8 === true),
        size: stream.byteLength,
      });
      const store = (raw: Buffer) => {
        const receive = options.receive;
        if (!receive) return Promise.reject(smtpError(554, '5.7.1 No inbound routes configured'));
        return receive(raw, envelope()).catch((error) => {
          throw replyFor(error, session.remoteAddress);
        });
      };
      void readSpooled(stream, session.id, store).then(
        (outcome) => {
          if (outcome !== 'aborted') callback();
        },
        (error) => callback(error),
      );
    },
  };

  /** How a message that could not be stored is answered; only what is neither the message's fault nor an outage is logged as an error. */
  const replyFor = (error: unknown, remoteAddress: string): Error => {
    if ((error as { responseCode?: number }).responseCode) return error as Error;
    // A full disk is an outage said once (storage-health.ts), then per refusal at warn as on the
    // submission port and the API: not an error with its stack for every report a remote MTA retries.
    if (isStorageFull(error)) {
      options.log.warn('storage full: inbound message refused', { remoteAddress, error: (error as Error).message });
      return toSmtpError(error);
    }
    // The message itself (mailparser refuses it): a permanent refusal, or the sender retries it for days.
    if (isAppError(error)) return toSmtpError(error);
    options.log.error('inbound message not stored', { error, remoteAddress });
    return smtpError(451, '4.3.0 Message not stored, try again later');
  };

  const readSpooled = async (stream: SMTPServerDataStream, sessionId: string, store: (raw: Buffer) => Promise<void>): Promise<'stored' | 'aborted'> => {
    const outcome = await reader.read(stream, sessionId, store);
    if (outcome.kind === 'too-large') throw smtpError(552, '5.3.4 Message exceeds the maximum size');
    if (outcome.kind === 'storage-failed') {
      options.log.error('inbound could not spool a message', { error: outcome.error });
      throw spoolFailure(outcome.error);
    }
    return outcome.kind === 'aborted' ? 'aborted' : 'stored';
  };

  const server = new SMTPServer(serverOptions);
  // A listen error (a busy port) fails the start, which says so itself; a client's error is only that.
  server.on('error', (error) => {
    if ((error as NodeJS.ErrnoException).syscall !== 'listen') options.log.warn('smtp connection error', { error: (error as Error).message });
  });

  return smtpListener(server, options.host, options.port, 'smtp');
}

/**
 * The Received header's `with` (RFC 3848, and RFC 6531 §3.7.3 for a transaction that used SMTPUTF8:
 * UTF8SMTP, UTF8SMTPS, UTF8SMTPA, UTF8SMTPSA). smtp-server names the first kind only.
 */
export function withProtocol(transmissionType: string, smtpUtf8: boolean): string {
  return smtpUtf8 ? transmissionType.replace(/^E?SMTP/, 'UTF8SMTP') : transmissionType;
}

async function defaultRefuse(): Promise<{ accept: false; code: number; message: string }> {
  return { accept: false, code: 550, message: '5.1.1 No inbound route for this recipient' };
}
