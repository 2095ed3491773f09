/**
 * The one typed configuration schema: every key with its default and description. `config.example.toml`
 * is generated from this table (`npm run config:example`) and a test keeps the two in step.
 */
export type KeyKind =
  | { type: 'string' }
  | { type: 'int'; min: number; max: number }
  | { type: 'bool' }
  | { type: 'enum'; values: readonly string[] }
  | { type: 'list' }
  | { type: 'duration' }
  | { type: 'durations' };

const durationUnits: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

export interface KeySpec<T> {
  kind: KeyKind;
  default: T;
  description: string;
}

const string = (def: string, description: string): KeySpec<string> => ({ kind: { type: 'string' }, default: def, description });
const int = (def: number, min: number, max: number, description: string): KeySpec<number> => ({
  kind: { type: 'int', min, max },
  default: def,
  description,
});
const port = (def: number, description: string) => int(def, 0, 65535, description);
const bool = (def: boolean, description: string): KeySpec<boolean> => ({ kind: { type: 'bool' }, default: def, description });
const oneOf = <V extends string>(values: readonly V[], def: V, description: string): KeySpec<V> => ({
  kind: { type: 'enum', values },
  default: def,
  description,
});
const list = (def: string[], description: string): KeySpec<string[]> => ({ kind: { type: 'list' }, default: def, description });
/** Durations are written `500ms`, `30s`, `5m`, `1h`, `5d` and held as milliseconds. */
const duration = (def: string, description: string): KeySpec<number> & { text: string } => ({
  kind: { type: 'duration' },
  default: parseDuration(def),
  text: def,
  description,
});
const durations = (def: string[], description: string): KeySpec<number[]> & { text: string[] } => ({
  kind: { type: 'durations' },
  default: def.map(parseDuration),
  text: def,
  description,
});

export const configSpec = {
  http: {
    host: string('127.0.0.1', 'Address the HTTP API listens on. Use 0.0.0.0 to accept connections from other machines.'),
    port: port(8080, 'HTTP API port. 0 picks a free port (tests).'),
    public_url: string('', 'Public base URL of the HTTP API, used in tracking pixels and signed links. Empty: http://<host>:<port>.'),
    body_limit_bytes: int(10_485_760, 1024, 104_857_600, 'Largest accepted request body; bigger requests get 413 payload-too-large.'),
  },
  smtp: {
    host: string('0.0.0.0', 'Address the inbound SMTP server listens on.'),
    port: port(2525, 'Inbound SMTP port (MX traffic). 0 picks a free port.'),
    hostname: string('', 'Name announced in the SMTP greeting. Empty: the machine hostname.'),
    max_message_bytes: int(26_214_400, 1024, 157_286_400, 'Largest inbound message accepted (SIZE extension).'),
  },
  storage: {
    data_dir: string('./data', 'Directory holding postino.sqlite and other runtime state.'),
    synchronous: oneOf(['FULL', 'NORMAL'] as const, 'FULL', 'SQLite synchronous pragma. FULL: an accepted email survives a power loss.'),
  },
  auth: {
    api_key: string('', 'API key of the default project. Empty: generate one on first start and print it once.'),
  },
  delivery: {
    mode: oneOf(['mx', 'relay', 'capture'] as const, 'mx', 'mx: direct to recipient MX hosts; relay: through relay_url; capture: store, never send (CI, sandboxes).'),
    port: port(25, 'Remote MX port for mx mode.'),
    helo_name: string('', 'Name sent in EHLO/HELO. Empty: the machine hostname.'),
    relay_url: string('', 'Smarthost for relay mode, e.g. smtp://user:pass@smtp.example.com:587 or smtps://...'),
    retry_schedule: durations(['5m', '10m', '30m', '1h', '2h', '4h'], 'Delays between delivery attempts; the last one repeats until give_up_after.'),
    give_up_after: duration('5d', 'Bounce a message still deferred this long after it was queued.'),
    allow_private_mx: bool(false, 'Allow delivering to loopback/private/link-local addresses (tests, homelabs).'),
    concurrency: int(20, 1, 1000, 'Messages in flight at once.'),
    per_domain_concurrency: int(5, 1, 100, 'Connections at once to one destination domain.'),
  },
  dns: {
    servers: list([], 'DNS servers as host or host:port, e.g. ["127.0.0.1:5353"]. Empty: the system resolver.'),
  },
  sending: {
    require_verified_domain: bool(true, 'Refuse fromAddress outside a verified domain (from-address-unverified). false for sandboxes.'),
  },
  scheduler: {
    enabled: bool(true, 'Run periodic jobs (scheduled emails, retries, re-verification, pruning).'),
  },
  log: {
    level: oneOf(['debug', 'info', 'warn', 'error', 'silent'] as const, 'info', 'Lowest level written to stdout as JSON lines.'),
  },
} as const;

type Spec = typeof configSpec;
export type Config = { [S in keyof Spec]: { [K in keyof Spec[S]]: Spec[S][K] extends KeySpec<infer T> ? T : never } };

export function parseDuration(text: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/.exec(text);
  if (!match) throw new Error(`"${text}" is not a duration (use e.g. 500ms, 30s, 5m, 1h, 5d)`);
  return Math.round(Number(match[1]) * durationUnits[match[2]]);
}

export function defaultConfig(): Config {
  const out: Record<string, Record<string, unknown>> = {};
  for (const [section, keys] of Object.entries(configSpec)) {
    out[section] = {};
    for (const [key, spec] of Object.entries(keys)) out[section][key] = structuredClone((spec as KeySpec<unknown>).default);
  }
  return out as Config;
}
