// Inbound routes: messages/s that Postfix's smtp-source delivers to a catch-all route on the inbound
// SMTP port (each parsed, checked by SPF/DKIM/DMARC through a DNS server on loopback, scored, stored
// with its raw bytes and its email.received row), beside smtp-source → smtp-sink measured in the same
// run, the same way. Twice: with a connection per message, where smtp-server's fixed 100 ms early-talker
// wait before each greeting bounds 20 sessions to ~200 msg/s (kept on the MX port: it turns away
// spambots that talk first), and with connections reused (smtp-source -d), which measures the work.
// The appliance runs in this process. Run: npx tsx bench/inbound.ts (BENCH_INBOUND_MESSAGES).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { startAppliance } from '../test/helpers/appliance.js';
import { startDnsServer } from '../test/helpers/dns-server.js';
import { measurePostfix, unpackPostfix } from './lib/postfix.js';

interface BenchResult {
  name: string;
  value: number | string;
  unit: string;
}

const messages = Number(process.env.BENCH_INBOUND_MESSAGES ?? 5_000);

export async function benchInbound(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'postino-bench-inbound-'));
  const dns = await startDnsServer();
  // The sender's domain publishes SPF for loopback, as a real sender's would.
  dns.set('source.test', 'TXT', ['v=spf1 ip4:127.0.0.1 -all']);
  const tools = unpackPostfix(dir);
  const app = await startAppliance({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: dns.address, POSTINO_LOG_LEVEL: 'warn' } });
  try {
    const route = await app.api('POST', '/v1/inbound/routes', { domain: 'inbox.test' });
    if (route.status !== 200) throw new Error(`route: ${JSON.stringify(route.body)}`);
    const results: BenchResult[] = [];
    for (const reuse of [false, true]) {
      const extraArgs = reuse ? ['-d'] : [];
      const before = await measurePostfix(tools, dir, extraArgs);
      const rate = await measureInbound(tools.source, tools.libDir, app.smtpPort, extraArgs, app.appliance.context.database.sqlite);
      const after = await measurePostfix(tools, dir, extraArgs);
      const how = reuse ? 'connections reused (-d)' : 'a connection per message';
      results.push(
        { name: `smtp-source → inbound route, ${how} (${messages.toLocaleString('en')} × 4 kB, 20 sessions; parsed, SPF/DKIM/DMARC, stored)`, value: Math.round(rate), unit: 'msg/s' },
        { name: `smtp-source → smtp-sink, ${how}, before / after`, value: `${Math.round(before)} / ${Math.round(after)}`, unit: 'msg/s' },
        { name: `inbound as share of smtp-source → smtp-sink, ${how}`, value: Math.round((rate / ((before + after) / 2)) * 1000) / 10, unit: '%' },
      );
    }
    return results;
  } finally {
    await app.stop();
    await dns.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Sends `messages` to the route and answers the rate, once every one of them is stored. */
async function measureInbound(source: string, libDir: string, port: number, extraArgs: string[], sqlite: { prepare(sql: string): { pluck(): { get(): unknown } } }): Promise<number> {
  const stored = () => sqlite.prepare('select count(*) from received_emails').pluck().get() as number;
  const before = stored();
  const started = performance.now();
  // As the ceiling: 20 parallel sessions, 4 kB messages. Asynchronously: the appliance is this process.
  await promisify(execFile)(source, [...extraArgs, '-s', '20', '-m', String(messages), '-l', '4000', '-f', 'a@source.test', '-t', 'b@inbox.test', `127.0.0.1:${port}`], { env: { LD_LIBRARY_PATH: libDir } });
  const seconds = (performance.now() - started) / 1000;
  if (stored() - before !== messages) throw new Error(`${stored() - before} received emails stored of ${messages} sent`);
  return messages / seconds;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const result of await benchInbound()) console.log(`${result.name}: ${result.value} ${result.unit}`);
}
