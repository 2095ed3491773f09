import type { Socket } from 'node:net';
import { SMTPServer, type SMTPServerOptions } from 'smtp-server';
// smtp-server exports its connection class under lib/ (package.json "exports": "./lib/*.js").
import { SMTPConnection } from 'smtp-server/lib/smtp-connection.js';

/**
 * The submission port's two departures from smtp-server, in a connection subclass. Coupled to
 * smtp-server 3.x internals (`connect`, `_setListeners`, `connectionReady`, `send`); the submission tests
 * assert both, so an upgrade that breaks them fails loudly.
 *
 * - **Immediate greeting** (unless `greetingDelay`): `SMTPConnection.init()` waits a fixed 100 ms before
 *   `connectionReady()` to catch early talkers (spam bots that send before the greeting). That caps an
 *   app opening one connection per message at ~10 messages/s per connection; on the submission port
 *   every client must AUTH with an API key, so the heuristic buys nothing. Everything else (listeners,
 *   the maxClients check, reverse lookup, onConnect, TLS) is the library's own code path.
 * - **No AUTH before STARTTLS** (unless `allowInsecureAuth`): smtp-server lists AUTH in the plaintext
 *   EHLO and refuses it afterwards with 538, by when a client has sent the API key in clear (AUTH PLAIN
 *   carries it in the command). RFC 4954 §4: a client uses only the mechanisms listed, so it upgrades first.
 */
export interface SubmissionServerOptions extends SMTPServerOptions {
  greetingDelay: boolean;
  /** smtp-server 3.x's text of the 530 to MAIL/RCPT/DATA before AUTH (not in @types/smtp-server). */
  authRequiredMessage?: string;
}

class SubmissionConnection extends (SMTPConnection as any) {
  constructor(server: unknown, socket: Socket, options: unknown) {
    super(server, socket, options);
  }

  init(this: any): void {
    if (this._server.options.greetingDelay) return super.init();
    this._setListeners(() => {
      if (this._server.options.maxClients && this._server.connections.size > this._server.options.maxClients) {
        return this.send(421, this.name + ' Too many connected clients, try again in a moment', false);
      }
      this.connectionReady();
    });
  }

  send(this: any, code: number, data: unknown, context: unknown): unknown {
    // The EHLO answer is the only 250 with a list of lines (the greeting line, then the extensions).
    if (code === 250 && Array.isArray(data) && !this.secure && !this._server.options.allowInsecureAuth) {
      data = data.filter((line: string, i: number) => i === 0 || !/^AUTH\b/i.test(line));
    }
    return super.send(code, data, context);
  }
}

export class SubmissionSmtpServer extends SMTPServer {
  constructor(options: SubmissionServerOptions) {
    super(options);
  }

  /** Same as SMTPServer#connect, with the connection class swapped. */
  connect(socket: Socket, socketOptions: unknown): void {
    const self = this as any;
    const connection = new SubmissionConnection(this, socket, socketOptions) as any;
    self.connections.add(connection);
    connection.on('error', (err: Error) => self._onError(err));
    connection.on('connect', (data: unknown) => self._onClientConnect(data));
    connection.init();
  }
}
