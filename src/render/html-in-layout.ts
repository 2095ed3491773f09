import { renderedTooLarge, renderLimits } from './budget.js';
import { createContext } from './context.js';
import { textDirection } from './direction.js';
import { htmlToText } from './html-to-text.js';
import { renderLayout } from './layout.js';
import { contentWidth, resolveTheme } from './theme.js';
import type { ProjectDesign, RenderedEmail, RenderOptions, TemplateProps } from './types.js';
import { substituteVariables } from './variables.js';

/**
 * The sender's own html inside the project's default layout (logo, card, footer with the unsubscribe
 * text): Messenger's `with-layout` content (spec §2.10). The html is the sender's and is placed as it is;
 * only the footer's markdown takes `props`. No text part: the html is not ours to read back as text.
 */
export function renderHtmlInLayout(html: string, props: TemplateProps, design: ProjectDesign, options: RenderOptions & { subject: string }): Omit<RenderedEmail, 'text'> {
  const ctx = createContext(resolveTheme(design ?? {}), props ?? {}, contentWidth, options);
  const subject = substituteVariables(options.subject, props ?? {}).replace(/[\r\n]+/g, ' ').trim();
  // The layout runs the way the sender's text does (direction.ts).
  ctx.direction = textDirection(htmlToText(html) || subject);
  const body = `<tr><td>${html}</td></tr>`;
  const rendered = renderLayout({ ctx, design: design ?? {}, broadcast: options.broadcast === true, subject, preheader: '', body });
  if (rendered.length > renderLimits.outputChars) throw renderedTooLarge();
  return { subject, html: rendered, inlineImages: ctx.images.list() };
}
