// A broadcast to 100,000 subscribed contacts (BENCH_BROADCAST_CONTACTS to change it), expanded by the
// scheduler's job into one email per recipient, 100 per write, in the production bundle with
// synchronous=FULL and the writer thread: recipients per second, and the event loop's longest stall while
// it runs (what an API request could have waited behind it). Twice: `with-layout` html (the layout
// rendered once, each recipient's link put in) and `template` content (rendered per recipient). Then
// the DELETE of a timezone-scheduled broadcast to them all, while a client keeps sending.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { benchApiKey, startInProcessAppliance, type InProcessAppliance } from './lib/in-process-appliance.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const contactCount = Number(process.env.BENCH_BROADCAST_CONTACTS ?? 100_000);

export async function benchMessenger(): Promise<BenchResult[]> {
  // The job is called here, not by the scheduler, so the measured run is the whole expansion.
  const app = await startInProcessAppliance('messenger', { POSTINO_SCHEDULER_ENABLED: 'false', POSTINO_HTTP_PUBLIC_URL: 'https://mail.example.com' });
  try {
    insertContacts(app, contactCount);
    const results: BenchResult[] = [];
    const layout = await queueDraft(app, { contentType: 'with-layout', html: `<h1>Spring news</h1>${'<p>Spring is here, and so is our newsletter. </p>'.repeat(20)}` });
    results.push(...(await measureExpansion(app, layout, 'with-layout')));
    const template = await api(app, 'POST', '/v1/templates', {
      name: 'Newsletter',
      subject: 'News for {name}',
      content: [
        { type: 'text', text: '# Spring news\n\nHello {name}, spring is here, and so is our newsletter.' },
        { type: 'button', label: 'Read more', url: 'https://example.com/news' },
        { type: 'text', text: '[Unsubscribe]({unsubscribeUrl})' },
      ],
    });
    if (!template.data?.id) throw new Error(`template not created: ${JSON.stringify(template)}`);
    const templated = await queueDraft(app, { contentType: 'template', templateId: template.data.id, templateProps: { name: 'reader' } });
    results.push(...(await measureExpansion(app, templated, 'template')));
    results.push(...(await measureDeletion(app)));
    return results;
  } finally {
    await app.stop();
  }
}

async function measureExpansion(app: InProcessAppliance, draftId: string, label: string): Promise<BenchResult[]> {
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const started = performance.now();
  await app.appliance.context.messenger.runDue(new Date());
  const seconds = (performance.now() - started) / 1000;
  delay.disable();
  const read = performance.now();
  const draft = (await api(app, 'GET', `/v1/messenger/${draftId}`)).data;
  const readMs = performance.now() - read;
  if (draft.status !== 'DONE' || draft.stats.totalRecipients !== contactCount) throw new Error(`${label}: ${draft.status}, ${draft.stats?.totalRecipients} emails, error ${draft.error}`);
  return [
    { name: `${label}: ${contactCount.toLocaleString('en-US')} recipients expanded`, value: Math.round(contactCount / seconds), unit: 'recipients/s' },
    { name: `${label}: event loop's longest stall during the expansion`, value: Math.round(delay.max / 1e6), unit: 'ms' },
    { name: `${label}: GET /v1/messenger/{id} with its stats over ${contactCount.toLocaleString('en-US')} emails`, value: Math.round(readMs * 10) / 10, unit: 'ms' },
  ];
}

/**
 * Deleting a timezone-scheduled broadcast whose emails all still wait for their recipients' local time,
 * while a client sends one email after another: how long the DELETE takes, and what the sends waited.
 */
async function measureDeletion(app: InProcessAppliance): Promise<BenchResult[]> {
  app.appliance.context.database.sqlite.prepare(`update contacts set timezone = 'America/Los_Angeles'`).run();
  const draftId = await queueDraft(app, { html: '<p>Later</p>', scheduledAt: new Date(Date.now() + 10 * 3_600_000).toISOString(), isTimezoneScheduled: true });
  await app.appliance.context.messenger.runDue(new Date());
  const draft = (await api(app, 'GET', `/v1/messenger/${draftId}`)).data;
  if (draft.status !== 'scheduled' || draft.stats.totalRecipients !== contactCount) throw new Error(`scheduled broadcast: ${draft.status}, ${draft.stats?.totalRecipients} emails`);
  let deleting = true;
  let slowestSendMs = 0;
  let sends = 0;
  const sender = (async () => {
    while (deleting) {
      const started = performance.now();
      await api(app, 'POST', '/v1/email/send', { toAddress: 'reader@example.com', fromAddress: 'app@sender.test', subject: 'Receipt', html: '<p>Thanks</p>' });
      slowestSendMs = Math.max(slowestSendMs, performance.now() - started);
      sends++;
    }
  })();
  const started = performance.now();
  const deleted = await api(app, 'DELETE', `/v1/messenger/${draftId}`);
  const deleteMs = performance.now() - started;
  deleting = false;
  await sender;
  if (!deleted.deleted) throw new Error(`not deleted: ${JSON.stringify(deleted)}`);
  const emails = contactCount.toLocaleString('en-US');
  return [
    { name: `DELETE of a timezone-scheduled broadcast, ${emails} emails waiting`, value: Math.round(deleteMs), unit: 'ms' },
    { name: 'sends by one client, one after another, during that DELETE', value: sends, unit: 'sends' },
    { name: 'slowest of those sends', value: Math.round(slowestSendMs), unit: 'ms' },
  ];
}

async function queueDraft(app: InProcessAppliance, content: Record<string, unknown>): Promise<string> {
  const draft = await api(app, 'POST', '/v1/messenger', { fromAddress: 'news@sender.test', fromName: 'News', subject: 'Spring news', status: 'queued', ...content });
  if (!draft.id) throw new Error(`draft not created: ${JSON.stringify(draft)}`);
  return draft.id;
}

/** Contacts written straight into the database, as an import would: the bench measures the broadcast. */
function insertContacts(app: InProcessAppliance, count: number): void {
  const { sqlite } = app.appliance.context.database;
  const projectId = sqlite.prepare(`select id from projects order by created_at limit 1`).pluck().get() as string;
  const insert = sqlite.prepare(
    `insert into contacts (id, project_id, email_address, email_key, is_subscribed, subscribed_at, source_type, groups, custom_props, created_at, updated_at)
     values (?, ?, ?, ?, 1, 0, 'api', '["newsletter"]', '{}', 0, 0)`,
  );
  sqlite.transaction(() => {
    for (let i = 0; i < count; i++) insert.run(`c${String(i).padStart(23, '0')}`, projectId, `reader${i}@example${i % 50}.com`, `reader${i}@example${i % 50}.com`);
  })();
}

async function api(app: InProcessAppliance, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${app.baseUrl}${path}`, { method, headers: { authorization: `Bearer ${benchApiKey}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return res.json();
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) {
  for (const result of await benchMessenger()) console.log(`${result.name}: ${result.value} ${result.unit}`);
}
