import { ConfigError } from '../config/load.js';
import { Resolver as DnsResolver } from 'node:dns/promises';
import { closeSync, openSync } from 'node:fs';

/**
 * All DNS goes through this port (DESIGN convention 4) so tests and sandboxes point it at a real DNS
 * server on loopback (`dns.servers`) instead of mocking lookups.
 */
export interface Resolver {
  resolveMx(name: string): Promise<{ exchange: string; priority: number }[]>;
  resolveTxt(name: string): Promise<string[][]>;
  resolve4(name: string): Promise<string[]>;
  resolve6(name: string): Promise<string[]>;
  resolveCname(name: string): Promise<string[]>;
}

export interface ResolverOptions {
  /** `host` or `host:port` entries; empty means the system resolver configuration. */
  servers: string[];
  timeoutMs?: number;
  tries?: number;
}

export function createResolver(options: ResolverOptions): Resolver {
  const resolver = new DnsResolver({ timeout: options.timeoutMs ?? 5000, tries: options.tries ?? 2 });
  if (options.servers.length > 0) {
    const refuse = (why: string) =>
      new ConfigError(`dns.servers: each entry must be an IP address, optionally with a port (127.0.0.1:5353, [::1]:53), got ${JSON.stringify(options.servers)} (${why})`);
    const badPort = options.servers.find((server) => !portInRange(server));
    if (badPort !== undefined) throw refuse(`${badPort}: a port is 1 to 65535`);
    try {
      resolver.setServers(options.servers);
    } catch (error) {
      throw refuse((error as Error).message);
    }
  }
  return {
    resolveMx: (name) => resolver.resolveMx(name),
    resolveTxt: (name) => resolver.resolveTxt(name),
    resolve4: (name) => resolver.resolve4(name),
    resolve6: (name) => resolver.resolve6(name),
    resolveCname: (name) => resolver.resolveCname(name),
  };
}

/** How a failed lookup should be treated by callers that must decide between "absent" and "try later". */
export type DnsFailure = 'nxdomain' | 'nodata' | 'temporary';

export function classifyDnsError(error: unknown): DnsFailure {
  const code = (error as { code?: string } | null)?.code;
  if (code === 'ENOTFOUND') return 'nxdomain';
  if (code === 'ENODATA') return 'nodata';
  // SERVFAIL, timeouts, refused, connection errors: the answer is unknown, not negative.
  return 'temporary';
}

/**
 * Whether a lookup failed on this side for want of file descriptors. c-ares cannot open its query socket
 * then and reports ECONNREFUSED at once, as for a server that refuses (measured: Node 20, every
 * descriptor of `ulimit -n 2000` held). Told apart by trying to open one descriptor ourselves.
 */
export function failedForWantOfDescriptors(error: unknown): boolean {
  if ((error as { code?: string } | null)?.code !== 'ECONNREFUSED') return false;
  try {
    closeSync(openSync('/dev/null', 'r'));
    return false;
  } catch (probeError) {
    const code = (probeError as NodeJS.ErrnoException).code;
    return code === 'EMFILE' || code === 'ENFILE';
  }
}

/** Node's setServers takes `127.0.0.1:99999` and wraps the port silently (to 34463): every lookup then failed. */
function portInRange(server: string): boolean {
  const port = server.startsWith('[') ? /\]:(.*)$/.exec(server)?.[1] : server.split(':').length === 2 ? server.split(':')[1] : undefined;
  if (port === undefined) return true;
  return /^\d{1,5}$/.test(port) && Number(port) >= 1 && Number(port) <= 65535;
}
