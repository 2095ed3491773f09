// Sending-domain hot paths: the lookup the send API makes per email (`findVerifiedSendingDomain`), the
// one delivery makes per message (`findSigningKey`), with 1,000 domains in the project, and the cost of
// generating a DKIM key pair on create (off the event loop, but it bounds create latency).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { createAppliance } from '../src/appliance.js';
import { defaultConfig } from '../src/config/schema.js';
import { domains } from '../src/db/schema/index.js';
import { generateDkimKeyPair } from '../src/domains/dkim-keys.js';
import { silentLogger } from '../src/lib/logger.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const domainCount = 1000;
const lookups = Number(process.env.BENCH_DOMAIN_LOOKUPS ?? 20_000);

export async function benchDomains(): Promise<BenchResult[]> {
  const dataDir = mkdtempSync(`${tmpdir()}/postino-bench-domains-`);
  const config = defaultConfig();
  config.storage.data_dir = dataDir;
  config.auth.api_key = 'pst_bench_key_0123456789abcdefghijklmnopqrstuv';
  const appliance = createAppliance({ config, log: silentLogger });
  try {
    const keys = await generateDkimKeyPair();
    const projectId = appliance.defaultProjectId;
    const { db } = appliance.context.database;
    for (let i = 0; i < domainCount; i++) {
      const domain = `d${i}.example.com`;
      db.insert(domains)
        .values({ id: `b${String(i).padStart(23, '0')}`, projectId, domain, status: 'success', dkimSelector: 'postino202601', dkimPrivateKey: keys.privateKeyPem, dkimPublicKey: keys.publicKeyBase64, dkimVerified: true, mailFromDomain: `bounce.${domain}`, mailFromStatus: 'success', createdAt: 0 })
        .run();
    }
    const service = appliance.context.domains;
    const verifiedRate = measure(lookups, (i) => service.findVerifiedSendingDomain(projectId, `news@mail.d${i % domainCount}.example.com`));
    const signingRate = measure(lookups, (i) => service.findSigningKey(projectId, `news@d${i % domainCount}.example.com`));
    const started = performance.now();
    for (let i = 0; i < 10; i++) await generateDkimKeyPair();
    const keygenMs = (performance.now() - started) / 10;
    return [
      { name: `findVerifiedSendingDomain (${domainCount} domains, subdomain address)`, value: Math.round(verifiedRate), unit: 'lookups/s' },
      { name: `findSigningKey (${domainCount} domains)`, value: Math.round(signingRate), unit: 'lookups/s' },
      { name: 'RSA-2048 DKIM key generation (libuv pool)', value: Math.round(keygenMs * 10) / 10, unit: 'ms each' },
    ];
  } finally {
    // stop(), not just the database: creating the appliance also started its delivery worker threads.
    await appliance.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function measure(count: number, work: (i: number) => unknown): number {
  const started = performance.now();
  for (let i = 0; i < count; i++) if (!work(i)) throw new Error('lookup found nothing');
  return count / ((performance.now() - started) / 1000);
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) console.table(await benchDomains());
