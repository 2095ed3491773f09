import { createServer } from 'node:net';
import { StartupError } from './errors.js';

/**
 * A listen() failure as an operator's error: the setting to change and why, instead of an errno and a
 * stack trace. `section` is the config section of the listener (`http`, `smtp`, `submission`). Errors
 * that are not about the address pass through unchanged.
 */
export function listenFailure(error: unknown, section: string, host: string, port: number): Error {
  const where = `${host}:${port}`;
  switch ((error as { code?: string }).code) {
    case 'EADDRINUSE':
      return new StartupError(`${section}.port: ${where} is already in use (set POSTINO_${section.toUpperCase()}_PORT or --${section}.port to another port)`);
    case 'EACCES':
      return new StartupError(`${section}.port: no permission to listen on ${where} (ports below 1024 need root or CAP_NET_BIND_SERVICE; or use a port above 1023)`);
    case 'EADDRNOTAVAIL':
      return new StartupError(`${section}.host: ${host} is not an address of this machine (0.0.0.0 listens on all of them)`);
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new StartupError(`${section}.host: ${host} cannot be resolved to an address`);
    default:
      return error as Error;
  }
}

/**
 * Why `host:port` cannot be listened on, by trying it: listhen reports every failure as "Unable to find
 * an available port". Resolves with the error, or undefined when the port is free after all.
 */
export function probeListen(host: string, port: number): Promise<Error | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', (error) => resolve(error));
    server.listen(port, host, () => server.close(() => resolve(undefined)));
  });
}
