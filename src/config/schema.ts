/**
 * The one typed configuration schema: every key with its default and description. `config.example.toml`
 * is generated from this table (`npm run config:example`) and a test keeps the two in step.
 */
export type KeyKind =
  /** `secret`: never echoed in an error. `pattern`: the value must match it, as `rule` says. */
  | { type: 'string'; secret?: boolean; pattern?: RegExp; rule?: string }
  | { type: 'int'; min: number; max: number }
  | { type: 'bool' }
  | { type: 'enum'; values: readonly string[] }
  | { type: 'list' }
  | { type: 'duration'; min: number; max: number }
  | { type: 'durations'; min: number; max: number };

const durationUnits: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

export interface KeySpec<T> {
  kind: KeyKind;
  default: T;
  description: string;
}

type StringRules = Omit<Extract<KeyKind, { type: 'string' }>, 'type'>;
const string = (def: string, description: string, rules: StringRules = {}): KeySpec<string> => ({ kind: { type: 'string', ...rules }, default: def, description });
/** Keys, passwords, secrets: empty by default, never echoed in a configuration error. */
const secretString = (description: string, rules: StringRules = {}) => string('', description, { ...rules, secret: true });
const int = (def: number, min: number, max: number, description: string): KeySpec<number> => ({
  kind: { type: 'int', min, max },
  default: def,
  description,
});
const port = (def: number, description: string) => int(def, 0, 65535, description);
/**
 * Node listens on every interface when given an empty host: an unset variable in an env file
 * (POSTINO_HTTP_HOST=${HOST}) would open the API, and /metrics, to the network without a word.
 */
const listenAddress = (def: string, description: string) =>
  string(def, description, { pattern: /\S/, rule: 'must name an address to listen on (it is empty; 0.0.0.0 is every interface)' });
/**
 * The API's listener (listhen) binds any host it cannot read to every interface: `[::1]` (an address
 * written as in a URL), a link-local address with its zone (`fe80::1%eth0`) or a name over 63
 * characters opened the API, and /metrics, to the network, with a warning off the JSON log.
 */
const httpListenAddress = (def: string, description: string) =>
  string(def, description, {
    pattern: /^(?!-)[\d.:A-Za-z-]{1,63}(?<!-)$/,
    rule: 'must be an IPv4 address, an IPv6 address without brackets or zone (::1, :: for every interface), or a host name of at most 63 characters',
  });
const bool = (def: boolean, description: string): KeySpec<boolean> => ({ kind: { type: 'bool' }, default: def, description });
const oneOf = <V extends string>(values: readonly V[], def: V, description: string): KeySpec<V> => ({
  kind: { type: 'enum', values },
  default: def,
  description,
});
const list = (def: string[], description: string): KeySpec<string[]> => ({ kind: { type: 'list' }, default: def, description });
/**
 * Durations are written `500ms`, `30s`, `5m`, `1h`, `5d` and held as milliseconds. Each has a range: by
 * default more than zero (a zero delay or interval spins) and at most what a timer can wait (Node fires
 * longer setTimeout delays at once, 2^31 - 1 ms ≈ 24.8 days). Ages compared with stored times
 * (retention, give-up) allow longer; the few where 0 means "off" say so.
 */
interface DurationRange {
  min?: string;
  max?: string;
}
const timerMax = '24d';
/** For ages compared with stored times, never waited on with a timer. */
const age: DurationRange = { max: '3650d' };
const range = (bounds: DurationRange) => ({ min: parseDuration(bounds.min ?? '1ms'), max: parseDuration(bounds.max ?? timerMax) });
const duration = (def: string, description: string, bounds: DurationRange = {}): KeySpec<number> & { text: string } => ({
  kind: { type: 'duration', ...range(bounds) },
  default: parseDuration(def),
  text: def,
  description,
});
const durations = (def: string[], description: string, bounds: DurationRange = {}): KeySpec<number[]> & { text: string[] } => ({
  kind: { type: 'durations', ...range(bounds) },
  default: def.map(parseDuration),
  text: def,
  description,
});

export const configSpec = {
  http: {
    host: httpListenAddress('127.0.0.1', 'Address the HTTP API listens on. Use 0.0.0.0 to accept connections from other machines.'),
    port: port(8080, 'HTTP API port. 0 picks a free port (tests).'),
    public_url: string('', 'Public base URL of the HTTP API, used in tracking pixels and signed links. Empty: http://<host>:<port>, with 127.0.0.1 for a wildcard host (0.0.0.0, ::); while mail leaves the machine, links to a loopback or wildcard host would reach no recipient, so nothing is tracked and broadcasts cannot be queued until it is set.'),
    body_limit_bytes: int(10_485_760, 1024, 104_857_600, 'Largest accepted request body; bigger requests get 413 payload-too-large.'),
    body_memory_bytes: int(104_857_600, 1_048_576, 17_179_869_184, 'API request bodies and SMTP submission messages of 64 kB or more processed at once, summed: one that would pass it waits (in arrival order; an HTTP body unread, a message before it is parsed) until others are answered. Each takes several times its size in memory until answered; this keeps many large batches or messages at once from exhausting the heap. One larger than this runs alone.'),
    metrics_token: secretString('Bearer token GET /metrics requires ("Authorization: Bearer <token>"; Prometheus: authorization.credentials). Empty: /metrics answers anyone who reaches the API, with the request, delivery and queue counts of every project; set it when other machines reach the API: http.host not a loopback address, http.trusted_proxies set, or http.public_url naming another host (then at least 16 characters; the start warns while it is empty). /healthz stays open either way (it names no project).', {
      pattern: /^[\x21-\x7e]*$/,
      rule: 'must be printable ASCII without spaces (it is sent as "Authorization: Bearer <token>")',
    }),
    keep_alive_timeout: duration('65s', 'Keep an idle HTTP connection open this long for the next request. Behind a reverse proxy or load balancer that reuses its connections to the API, set it above the idle timeout of the proxy (nginx upstream keepalive_timeout and AWS ALB: 60 s), else the proxy sends a request on a connection the API is closing and answers 502.'),
    trusted_proxies: list([], 'Addresses or CIDR ranges of reverse proxies in front of the API (e.g. ["127.0.0.1", "172.17.0.0/16"]): from them, the client address of open and click events is taken from X-Forwarded-For. Empty: the connecting address.'),
  },
  smtp: {
    host: listenAddress('0.0.0.0', 'Address the inbound SMTP server listens on.'),
    port: port(2525, 'Inbound SMTP port (MX traffic). 0 picks a free port.'),
    hostname: string('', 'Name announced in the SMTP greeting. Empty: the machine hostname.'),
    max_message_bytes: int(26_214_400, 1024, 157_286_400, 'Largest inbound message accepted (SIZE extension).'),
    received_retention: duration('0s', 'Delete received emails (inbound routes) this long after they arrived, with their raw message. 0s: keep forever.', { ...age, min: '0s' }),
  },
  storage: {
    // An unset variable in an env file (POSTINO_STORAGE_DATA_DIR=${DATA}) gives an empty path.
    data_dir: string('./data', 'Directory holding postino.sqlite and other runtime state.', { pattern: /\S/, rule: 'must name a directory (it is empty)' }),
    synchronous: oneOf(['FULL', 'NORMAL'] as const, 'FULL', 'SQLite synchronous pragma. FULL: an accepted email survives a power loss.'),
    writer_thread: bool(true, 'Commit accepted email from a worker thread with its own connection, off the event loop (more sends per second). false: every write on the main connection.'),
    min_free_mb: int(64, 0, 1_048_576, 'New mail (sends, SMTP submission, mail for inbound routes) is refused with storage-full while the file system of data_dir has less free space than this, so deliveries, bounces and SQLite keep room to drain the queue. 0: refuse only once the disk is full.'),
  },
  auth: {
    api_key: secretString('API key of the default project. Empty: generate one on first start and print it once. Changed or removed later, the key it created is revoked (removed with no other key left: a new one is generated and printed); a removed key configured again works again, but one replaced by another stays revoked, as does one revoked with `keys revoke`: configured again, the start is refused (set a new one). A key made with `keys create` (or printed on the first start) and then configured here stays when the value changes: only a key this setting created is revoked. At least 16 characters when other machines reach the API (http.host not a loopback address, http.trusted_proxies set, or http.public_url naming another host); a shorter one authenticates SMTP submission from loopback clients only.', {
      // It travels as "Authorization: Bearer <key>": a space would make it a key no request can send.
      pattern: /^[\x21-\x7e]*$/,
      rule: 'must be printable ASCII without spaces (it is sent as "Authorization: Bearer <key>")',
    }),
  },
  emails: {
    retention: duration('0s', 'Delete finished emails (delivered, open, bounce, complaint, error, suppressed) with their bodies, attachments, events and captured message this long after their last change; queued and scheduled ones stay, as do the suppression list and webhook events. A bounce or complaint report that arrives after its email was deleted is ignored, so keep them longer than reports take (days); a click link of a deleted email shows where it led on a page instead of redirecting. 0s: keep forever.', { ...age, min: '0s' }),
  },
  delivery: {
    mode: oneOf(['mx', 'relay', 'capture'] as const, 'mx', 'mx: direct to recipient MX hosts; relay: through relay_url; capture: store, never send (CI, sandboxes).'),
    capture_retention: duration('7d', 'Capture mode: delete captured messages this long after capture (the email records stay). 0s: keep forever.', { ...age, min: '0s' }),
    port: port(25, 'Remote MX port for mx mode.'),
    helo_name: string('', 'Name sent in EHLO/HELO. Empty: the machine hostname.'),
    relay_url: secretString('Smarthost for relay mode, e.g. smtp://user:pass@smtp.example.com:587 or smtps://... Checked in every mode; with mode = "mx" the start is refused (it would be ignored), with "capture" it is ignored. Its host name is looked up through dns.servers when they are set, else with the system\'s lookup (/etc/hosts, the search list).'),
    retry_schedule: durations(['5m', '10m', '30m', '1h', '2h', '4h'], 'Delays between delivery attempts; the last one repeats until give_up_after.', { min: '100ms' }),
    give_up_after: duration('5d', 'Bounce a message still deferred this long after it was queued.', age),
    allow_private_mx: bool(false, 'Allow delivering to loopback/private/link-local addresses (tests, homelabs).'),
    concurrency: int(20, 1, 1000, 'Messages in flight at once: being built or in their SMTP session (a delivered message waiting for its outcome to be written holds no slot). A message that would wait more than ~2 s for a busy destination goes back to the queue instead of holding a slot (docs/delivery.md).'),
    per_domain_concurrency: int(5, 1, 100, 'Connections open at once to one destination domain (or the relay), idle ones included; fewer for one that refuses a connection beside others (docs/delivery.md).'),
    signing_threads: int(0, 0, 64, 'Worker threads that compose and DKIM-sign outgoing messages (the CPU cost of delivery). 0: one per CPU (at most 4); signing is most of the CPU a delivery costs.'),
    connect_timeout: duration('30s', 'Give up connecting to one MX address after this long and try the next one.'),
    greeting_timeout: duration('5m', 'Wait this long for the 220 greeting, and for the whole session setup (greeting, EHLO, STARTTLS) (RFC 5321 §4.5.3.2: 5 minutes for the greeting).'),
    socket_timeout: duration('10m', 'Limit on the commands of one transaction up to DATA, then again on sending the message, then again on the reply after it, and on silence at any time (RFC 5321 §4.5.3.2: up to 10 minutes for the final reply to DATA).'),
    idle_connection_timeout: duration('5s', 'Keep a connection open this long after a delivery for the next message to the same host.'),
    // Renewed every third of itself with a timer: bounded like the delays the appliance waits on.
    lease: duration('15m', 'How long a claimed job is reserved for its attempt; after a crash it comes due again (at the latest) then.'),
    dns_cache_ttl: duration('30s', 'Cache MX and address lookups this long (per process); 0s disables.', { ...age, min: '0s' }),
    throttle_backoff_base: duration('1m', 'After a 421 / 4.7.x reply, hold mail for that destination domain this long; doubles with each further throttle reply.'),
    throttle_backoff_max: duration('1h', 'Longest throttle cool-down of one destination domain (the doubling stops here); a delivery resets it.'),
    mta_sts_enabled: bool(true, 'Honour MTA-STS policies (RFC 8461) of recipient domains: mode enforce requires TLS with a valid certificate to a listed MX.'),
    mta_sts_port: port(443, 'HTTPS port of mta-sts.<domain> policy hosts (tests point this elsewhere).'),
    mta_sts_timeout: duration('10s', 'Give up fetching one MTA-STS policy after this long.'),
    extra_ca_file: string('', 'PEM file of additional CA certificates trusted for MTA-STS policy fetches and verified SMTP TLS (private PKI, tests).'),
    suspension_enabled: bool(true, 'Pause a project (email-sending-paused) whose bounce rate is above 4.95% or complaint rate above 0.095%.'),
    suspension_window: duration('7d', 'The rates are computed over emails finished in this recent window, counted in whole UTC days (the counts are kept per day): a pause lifts at a midnight UTC once the counts that caused it have left the window.', { ...age, min: '1d' }),
    suspension_min_volume: int(1000, 0, 10_000_000, 'Below this many sent emails in the window a project is judged by counts, not rates.'),
    suspension_young_max_bounces: int(50, 0, 1_000_000, 'Most bounces allowed in the window while under suspension_min_volume sent emails; above it, always allowed (the rate must be passed as well), so more sending never pauses a project.'),
    suspension_young_max_complaints: int(5, 0, 1_000_000, 'Most complaints allowed in the window while under suspension_min_volume sent emails; above it, always allowed (the rate must be passed as well), so more sending never pauses a project.'),
  },
  dns: {
    servers: list([], 'DNS servers as IP addresses, with an optional port, e.g. ["127.0.0.1:5353"]. Empty: the system resolver. They must answer over TCP as well as UDP: Node\'s resolver sends no EDNS0, so an answer over 512 bytes (a domain\'s own 2048-bit DKIM key record, ~550 bytes) comes over TCP, and where only UDP gets through, DKIM checks stay temporary-error.'),
    timeout: duration('5s', 'The longest wait for an answer before asking again (or the next server); a lookup that never gets one is a temporary failure (mail is deferred, a domain check reads temporary-error). Node\'s resolver (c-ares) waits less for a server it has seen answer quickly, a few times its recent answer time (about 1 s per try was seen after fast answers), so a server that is suddenly much slower than usual times out sooner than this; more dns.tries give it more chances.', { min: '50ms', max: '60s' }),
    tries: int(2, 1, 10, 'Times each server is asked before the lookup fails.'),
  },
  domains: {
    mail_hostname: string('', 'Host published in the MX records of sending domains (bounce and inbound MX) and in SPF a:. Empty: delivery.helo_name (unless an address literal), then smtp.hostname, then the machine hostname.'),
    spf_mechanisms: list([], 'SPF mechanisms that authorise this appliance, e.g. ["ip4:203.0.113.5"] or ["include:_spf.example.net"]. Empty: a:<mail_hostname>.'),
    mail_from_subdomain: string('bounce', 'Label of the MAIL FROM (Return-Path) subdomain created under every sending domain.'),
    dmarc_rua: string('', 'Address suggested for DMARC aggregate reports (rua=mailto:...) in the DMARC record. Empty: none.'),
    domain_connect_provider: string('', 'Domain Connect template as providerId/serviceId. With domain_connect_ux_url set, domains get a dcUrl for one-click DNS setup.'),
    domain_connect_ux_url: string('', 'urlSyncUX of the DNS provider that applies the Domain Connect template, e.g. https://domainconnect.example-dns.com.'),
    recheck_unverified_every: duration('10m', 'How often the scheduler re-checks pending and failed domains.', age),
    recheck_verified_every: duration('24h', 'How often the scheduler re-checks verified domains.', age),
    pending_window: duration('72h', 'A new domain whose records are still missing stays pending (not failed) this long after creation, unless the owner asks POST /v1/domains/{id}/verify.', age),
    dns_failure_grace: duration('3d', 'A verified domain whose lookups only fail temporarily (SERVFAIL, timeout) stays verified this long before it is marked failed.', age),
  },
  sending: {
    require_verified_domain: bool(true, 'Refuse fromAddress outside a verified domain (from-address-unverified). false for sandboxes.'),
    click_tracking: bool(false, 'Rewrite http(s) links of html emails through a signed redirect that records click events.'),
  },
  scheduler: {
    enabled: bool(true, 'Run periodic jobs: release scheduled emails, send queued broadcasts (Messenger), re-verify domains, index email text for search, prune old data. Delivery and webhook retries run without it.'),
  },
  webhooks: {
    url: string('', 'Webhook endpoint of the default project defined by config (read-only in /v1/webhooks). Empty: none.'),
    secret: secretString('Secret of the config endpoint, sent verbatim in sidemail-secret. HMAC-SHA256 key of webhook-signature: base64-decoded bytes after a whsec_ prefix (Standard Webhooks), else its UTF-8 bytes. Empty: a whsec_ secret is generated once and kept (also when a secret set here is removed: the removed one stops working).'),
    events: list([], 'Event types the config endpoint receives, e.g. ["email.delivered", "email.bounce"]. Empty: all.'),
    allow_private: bool(false, 'Allow webhook URLs that resolve to loopback/private/link-local addresses (tests, homelabs).'),
    timeout: duration('10s', 'Time limit of one webhook POST (connect + response), and separately of the DNS lookup of its host.'),
    retry_base: duration('30s', 'First retry delay; doubles per attempt (with ±20% jitter) up to retry_max.', age),
    retry_max: duration('1h', 'Longest delay between two attempts of one delivery.', age),
    give_up_after: duration('24h', 'Mark a delivery failed once it has been retried this long after the event.', age),
    poll_interval: duration('1s', 'How often the dispatcher looks for due deliveries (new events also wake it at once).', { min: '50ms' }),
    concurrency: int(8, 1, 200, 'Webhook POSTs in flight at once.'),
    retention: duration('30d', 'Delete webhook events (with their deliveries and attempts) this long after the event once every delivery is final (delivered or failed). 0s: keep forever.', { ...age, min: '0s' }),
  },
  submission: {
    enabled: bool(true, 'Run the SMTP submission listener for apps (AUTH with an API key as the password).'),
    host: listenAddress('0.0.0.0', 'Address the submission listener binds to.'),
    port: port(2587, 'Submission port. 0 picks a free port (tests).'),
    hostname: string('', 'Name announced in the greeting and in the generated certificate. Empty: smtp.hostname, then the machine hostname.'),
    tls_key: string('', 'PEM private key file for STARTTLS, on this port and on the inbound smtp.port. Empty (with tls_cert empty): a self-signed certificate is generated into data_dir.'),
    tls_cert: string('', 'PEM certificate (chain) file for STARTTLS.'),
    allow_insecure_auth: bool(false, 'Accept AUTH before STARTTLS (the API key then crosses the wire in clear text; tests only).'),
    max_message_bytes: int(26_214_400, 1024, 157_286_400, 'Largest submitted message (SIZE extension).'),
    greeting_delay: bool(false, "Keep smtp-server's fixed 100 ms early-talker wait before the greeting (false: greet at once; authenticated apps are not spammers)."),
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

/** The shortest exact spelling: 86400000 → `1d`, 1500 → `1500ms`. */
export function formatDuration(ms: number): string {
  for (const [unit, size] of Object.entries(durationUnits).reverse()) if (ms !== 0 && ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}

export function defaultConfig(): Config {
  const out: Record<string, Record<string, unknown>> = {};
  for (const [section, keys] of Object.entries(configSpec)) {
    out[section] = {};
    for (const [key, spec] of Object.entries(keys)) out[section][key] = structuredClone((spec as KeySpec<unknown>).default);
  }
  return out as Config;
}
