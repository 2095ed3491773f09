import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedRequest {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
}

export type Responder = (request: ReceivedRequest) => { status: number; headers?: Record<string, string>; delayMs?: number };

/**
 * A real HTTP webhook receiver on loopback; each path answers with its own responder (default 200).
 * `host` '::1' listens on IPv6 loopback only (a dual-stack receiver whose IPv4 side is down).
 */
export async function startReceiver(options: { host?: '127.0.0.1' | '::1' } = {}) {
  const host = options.host ?? '127.0.0.1';
  const requests: ReceivedRequest[] = [];
  const responders = new Map<string, Responder>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const received = { path: req.url ?? '/', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      requests.push(received);
      const responder: Responder = responders.get(received.path) ?? (() => ({ status: 200 }));
      const reply = responder(received);
      setTimeout(() => {
        res.writeHead(reply.status, reply.headers);
        res.end('ok');
      }, reply.delayMs ?? 0);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port: 0, host, ipv6Only: host === '::1' }, resolve);
  });
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    url: (path: string) => `http://${host === '::1' ? '[::1]' : host}:${port}${path}`,
    requests,
    on: (path: string, responder: Responder) => responders.set(path, responder),
    to: (path: string) => requests.filter((r) => r.path === path),
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
