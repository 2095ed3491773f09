import { hostNetworkOf } from '../lib/private-address.js';
import { smtpError } from './smtp-replies.js';

/**
 * Most concurrent sessions per listener; past this smtp-server answers `421 Too many connected clients`
 * and senders retry. A session keeps at most 64 kB of a message in memory (larger messages go to the
 * spool, message-spool.ts).
 */
export const maxSessionsPerListener = 500;

/**
 * How long a stopping listener lets open sessions finish before it answers them `421` and closes them
 * (smtp-server's default, 30 s, is past the 10 s a stop may take). A client idling on the port would
 * otherwise hold the shutdown for all of it; a message cut off this way was not accepted, so its sender
 * retries it.
 */
export const smtpCloseTimeoutMs = 3_000;

/**
 * How long a session may wait for the client's next command or data (RFC 5321 §4.5.3.2.7: at least 5
 * minutes; Postfix's smtpd_timeout). smtp-server's 60 s default dropped a client mid-way that the RFC
 * lets take longer; the sessions per address below keep idle ones from crowding the listener.
 */
export const smtpIdleTimeoutMs = 5 * 60_000;

/**
 * Sessions at once from one host (an IPv4 address, an IPv6 /64: lib/private-address.ts hostNetworkOf), on
 * the inbound and the submission listener. An MTA delivers over a few connections; a host trickling a byte
 * a minute into each of `maxSessionsPerListener` sessions (every one resets the idle timer) would
 * otherwise shut every real mail server out.
 */
export const maxSessionsPerAddress = 20;

/** Counts open sessions by remote host; a refused session is not counted, so its close releases nothing. */
export function createSessionsPerAddress(max: number) {
  const open = new Map<string, number>();
  const admitted = new Set<string>();
  return {
    /** smtp-server's onConnect: admitted, or refused with 421 (the host may come back once some of its sessions end). */
    onConnect(session: { id: string; remoteAddress: string }, callback: (error?: Error) => void): void {
      if (this.admit(session.id, session.remoteAddress)) return callback();
      callback(smtpError(421, `4.7.0 Too many connections from ${hostNetworkOf(session.remoteAddress)}, try again later`));
    },
    admit(sessionId: string, address: string): boolean {
      const host = hostNetworkOf(address);
      const count = open.get(host) ?? 0;
      if (count >= max) return false;
      open.set(host, count + 1);
      admitted.add(sessionId);
      return true;
    },
    release(sessionId: string, address: string): void {
      if (!admitted.delete(sessionId)) return;
      const host = hostNetworkOf(address);
      const count = (open.get(host) ?? 1) - 1;
      if (count > 0) open.set(host, count);
      else open.delete(host);
    },
  };
}
