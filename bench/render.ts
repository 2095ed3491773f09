/**
 * Rendering throughput (issue 3): warm, pure renders per second of the receipt and weekly-report gallery
 * templates on one core (this process, one thread). Charts are cached by data, so the weekly report
 * measures the steady state of sending one report to many recipients. Run: `npx tsx bench/render.ts`.
 */
import { pathToFileURL } from 'node:url';
import { renderMarkdownEmail, renderTemplate, type ProjectDesign } from '../src/render/index.js';
import { galleryTemplates } from '../src/templates/gallery.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const design: ProjectDesign = {
  logo: { sizeWidth: 120, href: 'https://example.com', url: 'https://cdn.example.com/logo.png' },
  font: { name: 'Inter' },
  colors: { highlight: '#4f46e5', isDarkModeEnabled: true },
  footerTextTransactional: 'Acme Inc. · 18 Harbour Street, Bristol · [acme.example](https://acme.example)',
  unsubscribeText: 'You receive this email because you have an account with Acme.',
};

/** Calls `fn` repeatedly for about `ms` milliseconds after a warm-up; returns calls per second. */
function rate(fn: (i: number) => void, ms = 1500): number {
  // Warm up for a fixed time, not a fixed count, so the JIT has settled whatever the speed.
  const warm = process.hrtime.bigint() + 500_000_000n;
  for (let i = 0; process.hrtime.bigint() < warm; i++) fn(i);
  let count = 0;
  const start = process.hrtime.bigint();
  const budget = BigInt(ms) * 1_000_000n;
  let elapsed = 0n;
  while (elapsed < budget) {
    for (let i = 0; i < 50; i++) fn(count++);
    elapsed = process.hrtime.bigint() - start;
  }
  return Math.round(count / (Number(elapsed) / 1e9));
}

function template(slug: string) {
  const t = galleryTemplates.find((g) => g.slug === slug);
  if (!t) throw new Error(`gallery template ${slug} not found`);
  return t;
}

export async function benchRender(): Promise<BenchResult[]> {
  const receipt = template('receipt');
  const report = template('weekly-report');
  // Each recipient gets their own name and receipt number, as in a real send.
  const receiptProps = (i: number) => ({ ...receipt.sampleProps, receiptNumber: `2041-${i}`, paidAt: `March ${(i % 28) + 1}, 2026` });
  const markdown = '---\nsubject: Hi {name}\n---\n# Hello {name}\n\nYour code is **{code}**.\n\n[$btn Open]({url})\n\n```js\nconst a = 1;\n```\n';
  return [
    { name: 'render receipt (cid)', value: rate((i) => renderTemplate(receipt, receiptProps(i), design)), unit: 'renders/s' },
    { name: 'render weekly report (cid, charts cached)', value: rate((i) => renderTemplate(report, { ...report.sampleProps, visitors: String(i) }, design)), unit: 'renders/s' },
    { name: 'render receipt (data-uri preview)', value: rate((i) => renderTemplate(receipt, receiptProps(i), design, { imageMode: 'data-uri' })), unit: 'renders/s' },
    { name: 'render markdown email', value: rate((i) => renderMarkdownEmail(markdown, { name: `user${i}`, code: String(i), url: 'https://x.example' }, design)), unit: 'renders/s' },
    {
      name: 'render weekly report, new chart data every time',
      value: rate((i) => renderTemplate(report, { ...report.sampleProps, dailyVisitors: [i, 2, 3, 4, 5, 6, 7], dailySignups: [1, i % 9, 3, 4, 5, 6, 7] }, design), 1000),
      unit: 'renders/s',
    },
  ];
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchRender()) console.log(`${r.name.padEnd(50)} ${String(r.value).padStart(8)} ${r.unit}`);
}
