import { readFileSync, writeFileSync, mkdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { renderTemplate, type ContentNode, type ProjectDesign, type RenderedEmail, type RenderOptions, type TemplateProps } from '../../src/render/index.js';
import { contentRows } from './html-check.js';

export function render(content: unknown[], props: TemplateProps = {}, design: ProjectDesign = {}, options: RenderOptions = {}): RenderedEmail {
  return renderTemplate({ subject: 'Test', content: content as ContentNode[] }, props, design, options);
}

/** The content rows only (no layout), for focused assertions. */
export function body(content: unknown[], props: TemplateProps = {}, design: ProjectDesign = {}): string {
  return contentRows(render(content, props, design).html);
}

/** The <style> block of a rendered email. */
export function styleBlock(html: string): string {
  const start = html.indexOf('<style>:root');
  return html.slice(start, html.indexOf('</style>', start));
}

const goldenDir = join(import.meta.dirname, 'golden');

/**
 * Compares with test/render/golden/<name>.html; `UPDATE_GOLDEN=1` rewrites the file instead. Golden
 * files pin the exact markup of each node type so any change in output is a visible diff in review.
 */
export function assertGolden(name: string, actual: string): void {
  const file = join(goldenDir, `${name}.html`);
  const pretty = actual.replace(/<tr>/g, '\n<tr>');
  if (process.env.UPDATE_GOLDEN === '1' || !existsSync(file)) {
    mkdirSync(goldenDir, { recursive: true });
    writeFileSync(file, `${pretty}\n`);
    if (process.env.UPDATE_GOLDEN !== '1') assert.fail(`golden file ${name}.html was missing and has been written; re-run the tests`);
    return;
  }
  assert.equal(pretty, readFileSync(file, 'utf8').replace(/\n$/, ''), `output differs from golden/${name}.html (UPDATE_GOLDEN=1 to accept)`);
}
