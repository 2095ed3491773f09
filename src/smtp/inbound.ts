import { SMTPServer, type SMTPServerOptions } from 'smtp-server';
import { smtpListener, type SmtpListener } from './listener.js';
import { isStorageFull } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { createSessionsPerAddress, maxSessionsPerAddress, maxSessionsPerListener, readMessage, smtpCloseTimeoutMs } from './session-limits.js';
import { toSmtpError } from './smtp-replies.js';

export interface InboundSmtpOptions {
  host: string;
  port: number;
  hostname: string;
  maxMessageBytes: number;
  /** STARTTLS key and certificate; absent = STARTTLS not offered. */
  tls?: { key: string; cert: string };
  log: Logger;
  /**
   * Decides a recipient at RCPT time. The appliance accepts only the signed VERP addresses of emails it
   * sent (asynchronous bounces and complaints, `bounces/service.ts`); until inbound routes exist every
   * other recipient is refused with 550, so senders get an honest permanent answer.
   */
  checkRecipient?: (address: string) => Promise<{ accept: true } | { accept: false; code: number; message: string }>;
  /**
   * Recipients per transaction; past it RCPT is answered 452 4.5.3 (RFC 5321 §4.5.3.1.10), so the sender
   * delivers the rest in another transaction instead of having them accepted and not processed.
   */
  maxRecipients?: number;
  /**
   * Stores one accepted message; throwing answers 451 so the sender retries. `raw` is the first
   * `keepBytes` of it; `envelope.size` is the whole.
   */
  receive?: (raw: Buffer, envelope: { mailFrom: string; rcptTo: string[]; remoteAddress: string; size: number }) => Promise<void>;
  /** Bytes of a message kept for `receive`; the rest is read and dropped (default: all). */
  keepBytes?: number;
}

export type InboundSmtp = SmtpListener;

export function createInboundSmtp(options: InboundSmtpOptions): InboundSmtp {
  const sessionsPerAddress = createSessionsPerAddress(maxSessionsPerAddress);
  const serverOptions: SMTPServerOptions = {
    name: options.hostname || undefined,
    banner: 'Postino', // smtp-server writes "220 <name> ESMTP <banner>"
    size: options.maxMessageBytes,
    maxClients: maxSessionsPerListener,
    closeTimeout: smtpCloseTimeoutMs,
    // Opportunistic STARTTLS with the appliance's certificate (tls-cert.ts). Without one, none is offered:
    // smtp-server's built-in fallback is an expired certificate whose private key ships in the package.
    ...(options.tls ? { key: options.tls.key, cert: options.tls.cert } : { hideSTARTTLS: true }),
    authOptional: true,
    disabledCommands: ['AUTH'],
    disableReverseLookup: true,
    logger: false,
    onConnect(session, callback) {
      if (sessionsPerAddress.admit(session.id, session.remoteAddress)) return callback();
      callback(smtpError(421, `4.7.0 Too many connections from ${session.remoteAddress}, try again later`));
    },
    onClose(session) {
      sessionsPerAddress.release(session.id, session.remoteAddress);
    },
    onRcptTo(address, session, callback) {
      if (options.maxRecipients !== undefined && session.envelope.rcptTo.length >= options.maxRecipients) {
        return callback(smtpError(452, '4.5.3 Too many recipients, send the rest in another transaction'));
      }
      const check = options.checkRecipient ?? defaultRefuse;
      check(address.address).then(
        (verdict) => callback(verdict.accept ? undefined : smtpError(verdict.code, verdict.message)),
        (error) => {
          options.log.error('recipient check failed', { error });
          callback(smtpError(451, '4.3.0 Temporary failure, try again later'));
        },
      );
    },
    onData(stream, session, callback) {
      void readMessage(stream, options.keepBytes).then((raw) => {
        if (!raw) return callback(smtpError(552, '5.3.4 Message exceeds the maximum size'));
        const receive = options.receive;
        if (!receive) return callback(smtpError(554, '5.7.1 No inbound routes configured'));
        const envelope = {
          mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          rcptTo: session.envelope.rcptTo.map((r) => r.address),
          remoteAddress: session.remoteAddress,
          size: stream.byteLength,
        };
        receive(raw, envelope).then(
          () => callback(),
          (error) => {
            // A full disk is an outage said once (storage-health.ts), then per refusal at warn as on the
            // submission port and the API: not an error with its stack for every report a remote MTA retries.
            if (isStorageFull(error)) options.log.warn('storage full: inbound message refused', { remoteAddress: session.remoteAddress, error: (error as Error).message });
            else options.log.error('inbound message not stored', { error, remoteAddress: session.remoteAddress });
            callback(isStorageFull(error) ? toSmtpError(error) : smtpError(451, '4.3.0 Message not stored, try again later'));
          },
        );
      });
    },
  };
  const server = new SMTPServer(serverOptions);
  server.on('error', (error) => options.log.warn('smtp connection error', { error: (error as Error).message }));

  return smtpListener(server, options.host, options.port, 'smtp');
}

async function defaultRefuse(): Promise<{ accept: false; code: number; message: string }> {
  return { accept: false, code: 550, message: '5.1.1 No inbound route for this recipient' };
}

function smtpError(code: number, message: string): Error & { responseCode: number } {
  return Object.assign(new Error(message), { responseCode: code });
}
