import { AppError } from '../lib/errors.js';
import { textDirection, type TextDirection } from './direction.js';
import { renderedTooLarge, renderLimits } from './budget.js';
import { createContext, type RenderContext } from './context.js';
import { footerText, renderLayout } from './layout.js';
import { renderNodes } from './nodes/index.js';
import { contentWidth, resolveTheme } from './theme.js';
import type { ContentNode, ProjectDesign, RenderedEmail, RenderOptions, TemplateInput, TemplateProps } from './types.js';
import { substituteVariables } from './variables.js';

/**
 * template + props + project design → {subject, html, text, inlineImages}. Pure: no clock, no I/O, no
 * environment; the same inputs always give the same output (caches only memoise).
 */
export function renderTemplate(template: TemplateInput, props: TemplateProps, design: ProjectDesign, options: RenderOptions = {}): RenderedEmail {
  return renderContent(template, props ?? {}, design ?? {}, options);
}

/** Shared by templates and markdown emails; `prepare` adjusts the context first (markdown emails turn `breaks` off: markdown-email.ts). */
export function renderContent(
  template: TemplateInput,
  props: TemplateProps,
  design: ProjectDesign,
  options: RenderOptions,
  prepare?: (ctx: RenderContext) => void,
): RenderedEmail {
  try {
    return renderWith(template, props, design, options, prepare);
  } catch (error) {
    // The renderer walks content and markdown tokens recursively; input nested thousands deep (which the
    // HTTP edge's JSON depth limit does not see inside a markdown string) overflows the stack.
    if (error instanceof RangeError) throw new AppError('parameters-invalid', 'Content nests too deeply to render.');
    throw error;
  }
}

function renderWith(
  template: TemplateInput,
  props: TemplateProps,
  design: ProjectDesign,
  options: RenderOptions,
  prepare?: (ctx: RenderContext) => void,
  direction: TextDirection = 'ltr',
): RenderedEmail {
  const theme = resolveTheme(design);
  const ctx = createContext(theme, props, contentWidth, options);
  ctx.direction = direction;
  prepare?.(ctx);
  // Subjects are single-line headers: a prop with a newline must not start a new header.
  const subject = withinLineLimit('subject', substituteVariables(template.subject ?? '', props).replace(/[\r\n]+/g, ' ').trim());
  const preheader = withinLineLimit('preheader', substituteVariables(template.preheader ?? '', props).replace(/\s+/g, ' ').trim());
  const body = renderNodes(ctx, template.content as ContentNode[]);
  const bodyText = ctx.text.filter((s) => s.trim() !== '').join('\n\n');
  // Which way the text runs is known once it is rendered (props included): an email whose text starts
  // right-to-left is laid out again that way, the one case that renders twice.
  if (direction === 'ltr' && textDirection(bodyText || subject) === 'rtl') return renderWith(template, props, design, options, prepare, 'rtl');
  const broadcast = options.broadcast === true;
  const html = renderLayout({ ctx, design, broadcast, subject, preheader, body });
  const text = typeof template.emailText === 'string' && template.emailText.trim() !== ''
    ? substituteVariables(template.emailText, props)
    : [bodyText, ...footerText(ctx, design, broadcast)].filter((s) => s !== '').join('\n\n');
  // The html is counted node by node (budget.ts); a custom emailText is not part of it.
  if (text.length > renderLimits.textChars) throw renderedTooLarge(renderLimits.textChars, "email's text");
  return { subject, html, text: `${text.trim()}\n`, inlineImages: ctx.images.list() };
}

/** Far past any real subject (authored at most 1,000 characters, spec §8), yet no header of megabytes. */
export const renderedLineMaxChars = 10_000;

/** `rendered` if it is within renderedLineMaxChars; a refusal of the content (parameters-invalid) otherwise. */
export function withinLineLimit(field: 'subject' | 'preheader', rendered: string): string {
  if (rendered.length > renderedLineMaxChars) {
    throw new AppError('parameters-invalid', `The ${field} renders to more than ${renderedLineMaxChars.toLocaleString('en-US')} characters: its templateProps values are too long.`);
  }
  return rendered;
}
