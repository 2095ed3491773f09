// What an API write (a template create, through the templates service) costs the event loop, idle and
// during a send burst (wrk, 50 connections, html bodies), and how long the create itself takes. The
// event-loop time is the synchronous part of the call: every other request waits that long.
import { pathToFileURL } from 'node:url';
import { benchApiKey, startInProcessAppliance } from './lib/in-process-appliance.js';
import { postScript, runWrk } from './lib/wrk.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const creates = 200;
const pauseMs = 20;

interface CreateTimes {
  blockedMs: number[];
  latencyMs: number[];
}

const quantile = (values: number[], q: number) => [...values].sort((a, b) => a - b)[Math.floor(q * (values.length - 1))];
const round = (n: number) => Math.round(n * 100) / 100;

export async function benchApiWrites(): Promise<BenchResult[]> {
  const { appliance, baseUrl, dir, stop } = await startInProcessAppliance('api-writes');
  const templates = appliance.context.templates;
  const projectId = appliance.defaultProjectId;
  let created = 0;
  const createTemplates = async (until: () => boolean): Promise<CreateTimes> => {
    const times: CreateTimes = { blockedMs: [], latencyMs: [] };
    while (until()) {
      const started = performance.now();
      const pending = templates.create(projectId, { name: `bench-${created++}`, subject: 'Hi {name}', content: [{ type: 'text', text: 'Hello **{name}**' }] } as never);
      times.blockedMs.push(performance.now() - started);
      await pending;
      times.latencyMs.push(performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, pauseMs));
    }
    return times;
  };
  try {
    const html = { toAddress: 'ann@example.com', fromAddress: 'app@sender.test', subject: 'Your receipt', html: `<html><body>${'<p>Thanks for your order.</p>'.repeat(40)}</body></html>` };
    // Warm-up (JIT, the writer thread's start on the first send, page cache), as in the send bench: without
    // it the sends' p99 measured the cold start (108–195 ms against 37–41 ms warm).
    await runWrk(`${baseUrl}/v1/email/send`, postScript(html, benchApiKey), dir);
    const idle = await createTemplates(() => created < creates);
    let loadDone = false;
    const load = runWrk(`${baseUrl}/v1/email/send`, postScript(html, benchApiKey), dir).finally(() => (loadDone = true));
    const underLoad = await createTemplates(() => !loadDone);
    const sends = await load;
    const rows = (label: string, t: CreateTimes): BenchResult[] => [
      { name: `${label}: event-loop time per template create p50`, value: round(quantile(t.blockedMs, 0.5)), unit: 'ms' },
      { name: `${label}: event-loop time per template create p99`, value: round(quantile(t.blockedMs, 0.99)), unit: 'ms' },
      { name: `${label}: event-loop time per template create max`, value: round(quantile(t.blockedMs, 1)), unit: 'ms' },
      { name: `${label}: template create latency p50`, value: round(quantile(t.latencyMs, 0.5)), unit: 'ms' },
      { name: `${label}: template create latency p99`, value: round(quantile(t.latencyMs, 0.99)), unit: 'ms' },
    ];
    return [
      ...rows('idle', idle),
      ...rows('during html sends', underLoad),
      { name: `during html sends: template creates (one every ${pauseMs} ms or less)`, value: underLoad.latencyMs.length, unit: 'creates' },
      { name: 'during html sends: accepted sends', value: Math.round(sends.rps), unit: 'accepted/s' },
      { name: 'during html sends: send p99', value: round(sends.p99), unit: 'ms' },
    ];
  } finally {
    await stop();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchApiWrites()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
