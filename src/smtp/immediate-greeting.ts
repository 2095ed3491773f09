import type { Socket } from 'node:net';
import { SMTPServer, type SMTPServerOptions } from 'smtp-server';
// smtp-server exports its connection class under lib/ (package.json "exports": "./lib/*.js").
import { SMTPConnection } from 'smtp-server/lib/smtp-connection.js';

/**
 * smtp-server's `SMTPConnection.init()` waits a fixed 100 ms before `connectionReady()` to catch early
 * talkers (spam bots that send before the greeting). That caps an app opening one connection per
 * message at ~10 messages/s per connection. On the submission port every client must AUTH with an API
 * key, so the heuristic buys nothing: this subclass greets at once. Everything else (listeners, the
 * maxClients check, reverse lookup, onConnect, TLS) is the library's own code path.
 *
 * Coupled to smtp-server 3.x internals (`connect`, `_setListeners`, `connectionReady`); the submission
 * test asserts the greeting arrives in under 100 ms, so an upgrade that breaks this fails loudly.
 */
class ImmediateGreetingConnection extends (SMTPConnection as any) {
  constructor(server: unknown, socket: Socket, options: unknown) {
    super(server, socket, options);
  }

  init(this: any): void {
    this._setListeners(() => {
      if (this._server.options.maxClients && this._server.connections.size > this._server.options.maxClients) {
        return this.send(421, this.name + ' Too many connected clients, try again in a moment', false);
      }
      this.connectionReady();
    });
  }
}

export class ImmediateGreetingSmtpServer extends SMTPServer {
  constructor(options: SMTPServerOptions) {
    super(options);
  }

  /** Same as SMTPServer#connect, with the connection class swapped. */
  connect(socket: Socket, socketOptions: unknown): void {
    const self = this as any;
    const connection = new ImmediateGreetingConnection(this, socket, socketOptions) as any;
    self.connections.add(connection);
    connection.on('error', (err: Error) => self._onError(err));
    connection.on('connect', (data: unknown) => self._onClientConnect(data));
    connection.init();
  }
}
