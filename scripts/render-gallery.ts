/**
 * Writes screenshots of every gallery template and the markdown sample at desktop, mobile and dark
 * into render-output/ (gitignored), plus the HTML, so a person can look at what the renderer produces.
 * Run: `npx tsx scripts/render-gallery.ts [slug...]`.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderMarkdownEmail, renderTemplate, type RenderedEmail } from '../src/render/index.js';
import { galleryTemplates } from '../src/templates/gallery.js';
import { chromiumAvailable, chromiumPath, launchChromium, viewports } from '../test/render/chromium.js';
import { sampleDesign, sampleMarkdown, sampleMarkdownProps } from '../test/render/fixtures.js';

const outDir = join(process.cwd(), 'render-output');

function samples(only: string[]): { slug: string; email: RenderedEmail }[] {
  const design = sampleDesign();
  const list = galleryTemplates.map((t) => ({ slug: t.slug, email: renderTemplate(t, t.sampleProps, design, { imageMode: 'data-uri' }) }));
  list.push({ slug: 'markdown', email: renderMarkdownEmail(sampleMarkdown, sampleMarkdownProps, design, { imageMode: 'data-uri' }) });
  return only.length ? list.filter((s) => only.includes(s.slug)) : list;
}

async function main(): Promise<void> {
  if (!chromiumAvailable()) {
    console.error(`render-gallery: ${chromiumPath} not found; install it with "apt-get install -y chromium".`);
    process.exit(1);
  }
  mkdirSync(outDir, { recursive: true });
  const browser = await launchChromium();
  try {
    for (const { slug, email } of samples(process.argv.slice(2))) {
      writeFileSync(join(outDir, `${slug}.html`), email.html);
      for (const v of viewports) {
        const context = await browser.newContext({ viewport: { width: v.width, height: v.height }, colorScheme: v.colorScheme, deviceScaleFactor: 1 });
        const page = await context.newPage();
        await page.setContent(email.html, { waitUntil: 'load' });
        const file = join(outDir, `${slug}-${v.name}.png`);
        await page.screenshot({ path: file, fullPage: true });
        await context.close();
        console.log(`wrote ${file}`);
      }
    }
  } finally {
    await browser.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
