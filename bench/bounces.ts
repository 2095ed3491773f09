// Asynchronous bounce handling: pure report interpretation rate (mailparser + DSN/ARF parsers) and
// end-to-end DSNs over the inbound SMTP port (RCPT check, parse, one write each) with a pooled sender.
// Run: npx tsx bench/bounces.ts
import { pathToFileURL } from 'node:url';
import { eq } from 'drizzle-orm';
import nodemailer from 'nodemailer';
import { readReport } from '../src/bounces/read-report.js';
import { capturedMessages, emails } from '../src/db/schema/index.js';
import { startAppliance } from '../test/helpers/appliance.js';
import { arfComplaint, postfixHardBounce } from '../test/bounces/samples.js';

interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

export async function benchBounces(): Promise<BenchResult[]> {
  return [...(await benchParse()), await benchInbound()];
}

async function benchParse(): Promise<BenchResult[]> {
  const params = { to: 'bounce-65a4f0c1a1b2c3d4e5000001-0123456789abcdef0123@bounce.sender.test', rcpt: 'nobody@inbox.test' };
  const results: BenchResult[] = [];
  for (const [name, raw] of [['DSN (Postfix) parse', postfixHardBounce(params)], ['ARF parse', arfComplaint(params)]] as const) {
    const buffer = Buffer.from(raw);
    for (let i = 0; i < 200; i++) await readReport(buffer, { nullSender: true }); // warm-up
    const count = 3000;
    const started = performance.now();
    for (let i = 0; i < count; i++) await readReport(buffer, { nullSender: true });
    results.push({ name, value: Math.round(count / ((performance.now() - started) / 1000)), unit: 'reports/s' });
  }
  return results;
}

async function benchInbound(): Promise<BenchResult> {
  const t = await startAppliance({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DELIVERY_MODE: 'capture', POSTINO_LOG_LEVEL: 'silent' } });
  const count = 500;
  try {
    const db = t.appliance.context.database.db;
    const ids: string[] = [];
    for (let i = 0; i < count; i++) {
      const response = await t.api('POST', '/v1/email/send', { toAddress: `user${i}@inbox.test`, fromAddress: 'hello@sender.test', subject: 'Hi', text: 'Hi' });
      ids.push(response.body.id as string);
    }
    const verps: string[] = [];
    for (const id of ids) {
      for (;;) {
        const row = db.select({ mailFrom: capturedMessages.mailFrom }).from(capturedMessages).where(eq(capturedMessages.emailId, id)).get();
        if (row) {
          verps.push(row.mailFrom);
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    }
    const transport = nodemailer.createTransport({ pool: true, maxConnections: 8, maxMessages: Infinity, host: '127.0.0.1', port: t.smtpPort, secure: false, ignoreTLS: true });
    const started = performance.now();
    await Promise.all(verps.map((verp, i) => transport.sendMail({ envelope: { from: '', to: [verp] }, raw: postfixHardBounce({ to: verp, rcpt: `user${i}@inbox.test` }) })));
    const rate = count / ((performance.now() - started) / 1000);
    transport.close();
    const bounced = db.select({ id: emails.id }).from(emails).where(eq(emails.status, 'bounce')).all().length;
    if (bounced !== count) throw new Error(`only ${bounced} of ${count} emails bounced`);
    return { name: 'DSN over inbound SMTP → bounce recorded (8 connections)', value: Math.round(rate), unit: 'reports/s' };
  } finally {
    await t.stop();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) console.table(await benchBounces());
