// SMTP submission throughput for apps that open one connection per message (nodemailer without a pool),
// with smtp-server's stock 100 ms early-talker wait and with the immediate greeting the submission port
// uses. Run: npx tsx bench/submission.ts
import { pathToFileURL } from 'node:url';
import nodemailer from 'nodemailer';
import { startAppliance } from '../test/helpers/appliance.js';

interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

export async function benchSubmission(): Promise<BenchResult[]> {
  const results: BenchResult[] = [];
  for (const delay of [true, false]) {
    const t = await startAppliance({
      env: {
        POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
        POSTINO_DELIVERY_MODE: 'capture',
        POSTINO_LOG_LEVEL: 'silent',
        POSTINO_SUBMISSION_GREETING_DELAY: String(delay),
        POSTINO_SUBMISSION_ALLOW_INSECURE_AUTH: 'true',
      },
    });
    try {
      const label = delay ? 'stock 100 ms greeting wait' : 'immediate greeting';
      for (const tls of [true, false]) {
        const count = delay ? 30 : 150;
        const rate = await sendSequentially(t.appliance.submissionPort, t.apiKey, tls, count);
        results.push({ name: `1 connection/message, ${tls ? 'STARTTLS' : 'plain'}+AUTH, ${label}`, value: Math.round(rate * 10) / 10, unit: 'msg/s' });
      }
      const rate = await sendConcurrently(t.appliance.submissionPort, t.apiKey, 10, delay ? 100 : 500);
      results.push({ name: `10 parallel clients, 1 connection/message, STARTTLS+AUTH, ${label}`, value: Math.round(rate * 10) / 10, unit: 'msg/s' });
    } finally {
      await t.stop();
    }
  }
  return results;
}

function transport(port: number, key: string, tls: boolean) {
  return nodemailer.createTransport({
    host: '127.0.0.1',
    port,
    secure: false,
    requireTLS: tls,
    ignoreTLS: !tls,
    tls: { rejectUnauthorized: false },
    auth: { user: 'bench', pass: key },
  });
}

function message(i: number) {
  return { from: 'bench@sender.test', to: `r${i}@rcpt.test`, subject: `bench ${i}`, text: 'hello' };
}

async function sendSequentially(port: number, key: string, tls: boolean, count: number): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < count; i++) {
    const client = transport(port, key, tls);
    await client.sendMail(message(i));
    client.close();
  }
  return count / ((performance.now() - started) / 1000);
}

async function sendConcurrently(port: number, key: string, clients: number, total: number): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (next < total) {
        const i = next++;
        const client = transport(port, key, true);
        await client.sendMail(message(i));
        client.close();
      }
    }),
  );
  return total / ((performance.now() - started) / 1000);
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) console.table(await benchSubmission());
