import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { servedDomainQuery } from '../../src/bounces/repo.js';
import { createBouncesService } from '../../src/bounces/service.js';
import { openDatabase } from '../../src/db/client.js';
import { migrateDatabase } from '../../src/db/migrate.js';
import { createWriteQueue } from '../../src/db/write-queue.js';
import { ManualClock } from '../../src/lib/clock.js';
import { silentLogger } from '../../src/lib/logger.js';
import { createUrlSigner } from '../../src/lib/signing.js';

test('postmaster at a served domain is looked up by name in an index, not by reading every domain row', async () => {
  // Asked at every RCPT TO:<postmaster@…> of the public inbound listener: with 1,000 domains (DKIM key
  // pairs and verification results, a page or so each) every such RCPT read all of them, ~9 ms.
  const handle = openDatabase({ path: join(mkdtempSync(join(tmpdir(), 'postino-served-domains-')), 'postino.sqlite'), synchronous: 'NORMAL' });
  const writes = createWriteQueue(handle.sqlite, silentLogger);
  try {
    migrateDatabase(handle.db);
    const { sqlite } = handle;
    const privateKey = 'k'.repeat(1700);
    const publicKey = 'p'.repeat(400);
    const verification = JSON.stringify({ result: 'pass', records: Array.from({ length: 6 }, (_, i) => ({ purpose: `r${i}`, hostname: 'h.test', expected: 'v'.repeat(300), status: 'pass' })) });
    const project = sqlite.prepare(`insert into projects (id, name, is_default, created_at, updated_at) values (?, 'P', ?, 0, 0)`);
    const domain = sqlite.prepare(
      `insert into domains (id, project_id, domain, status, dkim_selector, dkim_private_key, dkim_public_key, dkim_verified, mail_from_domain, mail_from_status, verification, created_at)
       values (?, ?, ?, 'success', 's1', ?, ?, 1, ?, 'success', ?, 0)`,
    );
    sqlite.transaction(() => {
      for (let p = 0; p < 100; p++) project.run(`p${String(p).padStart(23, '0')}`, p === 0 ? 1 : 0);
      for (let d = 0; d < 1_000; d++) {
        domain.run(`d${String(d).padStart(23, '0')}`, `p${String(d % 100).padStart(23, '0')}`, `sender${d}.test`, privateKey, publicKey, `bounce.sender${d}.test`, verification);
      }
    })();

    const plan = (sqlite.prepare(`explain query plan ${servedDomainQuery}`).all('sender1.test', 'sender1.test') as { detail: string }[]).map((row) => row.detail);
    assert.ok(!plan.some((detail) => /^SCAN domains/.test(detail)), `no scan of the domains: ${plan.join(' | ')}`);
    assert.ok(plan.some((detail) => detail.includes('domains_domain_lower_idx')), plan.join(' | '));
    assert.ok(plan.some((detail) => detail.includes('domains_mail_from_domain_lower_idx')), plan.join(' | '));

    const bounces = createBouncesService({ db: handle.db, sqlite, writes, clock: new ManualClock('2026-03-01T00:00:00Z'), log: silentLogger, signer: createUrlSigner('secret'), localNames: ['mx.appliance.test'] });
    const verdict = async (address: string) => (await bounces.checkRecipient(address)).accept;
    assert.equal(await verdict('postmaster@sender999.test'), true, 'a sending domain of any project');
    assert.equal(await verdict('postmaster@BOUNCE.Sender7.test'), true, 'a MAIL FROM domain, in any case');
    assert.equal(await verdict('postmaster@mx.appliance.test'), true, 'the host itself');
    assert.equal(await verdict('postmaster@gmail.com'), false, 'not a domain served here');
    assert.equal(await verdict('postmaster@sender1000.test'), false);
  } finally {
    await writes.close();
    handle.close();
  }
});
