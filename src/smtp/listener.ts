import type { AddressInfo } from 'node:net';
import type { SMTPServer } from 'smtp-server';
import { listenFailure } from '../lib/listen-errors.js';

/** One SMTP listener's lifecycle, shared by the inbound and submission ports. */
export interface SmtpListener {
  /** Resolves with the bound port (useful with port 0). */
  start(): Promise<number>;
  /** Stops accepting; resolves once open sessions have ended. */
  stop(): Promise<void>;
  readonly listening: boolean;
}

/** `section` is the listener's config section (`smtp`, `submission`), named when it cannot listen. */
export function smtpListener(server: SMTPServer, host: string, port: number, section: string): SmtpListener {
  let listening = false;
  return {
    get listening() {
      return listening;
    },
    start: () =>
      new Promise<number>((resolve, reject) => {
        const onError = (error: NodeJS.ErrnoException) => reject(listenFailure(error, section, host, port));
        server.server.once('error', onError);
        server.listen(port, host, () => {
          server.server.off('error', onError);
          listening = true;
          resolve((server.server.address() as AddressInfo).port);
        });
      }),
    stop: () =>
      new Promise<void>((resolve) => {
        if (!listening) return resolve();
        listening = false;
        server.close(() => resolve());
      }),
  };
}
