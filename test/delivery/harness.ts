import { Resolver as NodeResolver } from 'node:dns/promises';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { dkimVerify } from 'mailauth/lib/dkim/verify';
import { domains, emailEvents, emails, deliveryJobs } from '../../src/db/schema/index.js';
import { startAppliance, type StartOptions, type TestAppliance } from '../helpers/appliance.js';
import { startDnsServer, type TestDnsServer } from '../helpers/dns-server.js';
import { startSmtpSink, type SmtpSink, type SmtpSinkOptions } from '../helpers/smtp-sink.js';

/** One delivery scenario: a real DNS server, a real SMTP sink, the real appliance pointed at both. */
export interface DeliveryRig {
  dns: TestDnsServer;
  sink: SmtpSink;
  app: TestAppliance;
  /** Stops the appliance and starts it again on the same data dir, DNS server and sink (a restart). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export async function startRig(options: { sink?: SmtpSinkOptions; env?: Record<string, string>; app?: StartOptions } = {}): Promise<DeliveryRig> {
  const dns = await startDnsServer();
  const sink = await startSmtpSink(options.sink);
  // The rig's own data dir, kept across restart() and removed at stop() unless the caller gave one.
  const dataDir = options.app?.dataDir ?? mkdtempSync(join(tmpdir(), 'postino-rig-'));
  const appOptions: StartOptions = {
    ...options.app,
    dataDir,
    env: {
      POSTINO_DELIVERY_PORT: String(sink.port),
      POSTINO_DELIVERY_ALLOW_PRIVATE_MX: 'true',
      POSTINO_DNS_SERVERS: dns.address,
      POSTINO_DELIVERY_RETRY_SCHEDULE: '300ms,300ms,300ms',
      POSTINO_DELIVERY_HELO_NAME: 'mta.postino.test',
      POSTINO_DELIVERY_DNS_CACHE_TTL: '0s',
      // 451 4.7.x (greylisting) is a throttle reply: keep the destination cool-down short in tests.
      POSTINO_DELIVERY_THROTTLE_BACKOFF_BASE: '100ms',
      POSTINO_LOG_LEVEL: 'warn',
      ...options.env,
    },
  };
  const rig: DeliveryRig = {
    dns,
    sink,
    app: await startAppliance(appOptions),
    async restart() {
      await rig.app.stop();
      rig.app = await startAppliance(appOptions);
    },
    async stop() {
      await rig.app.stop();
      await sink.stop();
      await dns.stop();
      if (!options.app?.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return rig;
}

/** Registers a sending domain through the API, publishes its DKIM key in the test DNS and marks it verified. */
export async function addSendingDomain(rig: DeliveryRig, domain: string): Promise<{ selector: string; publicKey: string; mailFromDomain: string }> {
  const created = await rig.app.api('POST', '/v1/domains', { domain });
  if (created.status >= 300) throw new Error(`domain create failed: ${JSON.stringify(created.body)}`);
  const db = rig.app.appliance.context.database.db;
  db.update(domains).set({ status: 'success', dkimVerified: true, mailFromStatus: 'success' }).where(eq(domains.domain, domain)).run();
  const row = db.select().from(domains).where(eq(domains.domain, domain)).get()!;
  rig.dns.set(`${row.dkimSelector}._domainkey.${domain}`, 'TXT', [`v=DKIM1; k=rsa; p=${row.dkimPublicKey}`]);
  return { selector: row.dkimSelector, publicKey: row.dkimPublicKey, mailFromDomain: row.mailFromDomain };
}

/** A reply the sink holds back: the messages it is given stay on the wire until `release()`. */
export interface HeldReply {
  beforeReply: () => Promise<void>;
  /** A message reached the sink and waits for its reply. */
  onTheWire(): boolean;
  release(): void;
}

export function holdReplies(): HeldReply {
  let release: () => void = () => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  let reached = false;
  return {
    beforeReply: () => {
      reached = true;
      return held;
    },
    onTheWire: () => reached,
    release: () => release(),
  };
}

/** Points `domain`'s MX at 127.0.0.1 (the sink listens there on delivery.port). */
export function routeToSink(dns: TestDnsServer, domain: string, host = `mx.${domain}`): void {
  dns.set(domain, 'MX', [{ preference: 10, exchange: host }]);
  dns.set(host, 'A', ['127.0.0.1']);
}

export async function send(rig: DeliveryRig, body: Record<string, unknown>): Promise<string> {
  const response = await rig.app.api('POST', '/v1/email/send', { subject: 'Hello', text: 'Hello there', ...body });
  if (response.status !== 200) throw new Error(`send failed ${response.status}: ${JSON.stringify(response.body)}`);
  return response.body.id as string;
}

export function emailStatus(rig: DeliveryRig, id: string): string | undefined {
  return rig.app.appliance.context.database.db.select({ status: emails.status }).from(emails).where(eq(emails.id, id)).get()?.status;
}

export function eventsOf(rig: DeliveryRig, id: string) {
  return rig.app.appliance.context.database.db.select().from(emailEvents).where(eq(emailEvents.emailId, id)).orderBy(emailEvents.id).all();
}

export function jobOf(rig: DeliveryRig, id: string) {
  return rig.app.appliance.context.database.db.select().from(deliveryJobs).where(eq(deliveryJobs.emailId, id)).get();
}

/** Polls until the email leaves `queued` (or the timeout). */
export async function waitForFinal(rig: DeliveryRig, id: string, timeoutMs = 10_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const status = emailStatus(rig, id);
    if (status && status !== 'queued') return status;
    if (Date.now() > deadline) throw new Error(`email ${id} still ${status} after ${timeoutMs} ms; events: ${JSON.stringify(eventsOf(rig, id))}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** Polls until the email has an event of `type` (or the timeout) and returns it. */
export async function waitForEvent(rig: DeliveryRig, id: string, type: string, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const event = eventsOf(rig, id).find((e) => e.type === type);
    if (event) return event;
    if (Date.now() > deadline) throw new Error(`no ${type} event for ${id} after ${timeoutMs} ms; events: ${JSON.stringify(eventsOf(rig, id))}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** mailauth's verifier, resolving the key over the wire from the test DNS server. */
export async function verifyDkim(raw: Buffer, dnsAddress: string) {
  const resolver = new NodeResolver();
  resolver.setServers([dnsAddress]);
  const result = await dkimVerify(raw, {
    resolver: async (name: string, type: string) => {
      if (type !== 'TXT') throw Object.assign(new Error('unsupported'), { code: 'ENOTFOUND' });
      return resolver.resolveTxt(name);
    },
  } as never);
  return result.results;
}

/** A second, unrelated implementation (python dkimpy) when installed; returns undefined when it is not. */
export function verifyWithDkimpy(raw: Buffer, txtRecord: string): boolean | undefined {
  const script = `
import sys, dkim
record = sys.argv[1].encode()
msg = sys.stdin.buffer.read()
ok = dkim.verify(msg, dnsfunc=lambda name, timeout=5: record)
print("PASS" if ok else "FAIL")
`;
  try {
    const out = execFileSync(existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3', ['-c', script, txtRecord], { input: raw }).toString().trim();
    return out === 'PASS';
  } catch (error) {
    if (String((error as { stderr?: Buffer }).stderr ?? '').includes("No module named 'dkim'")) return undefined;
    throw error;
  }
}
