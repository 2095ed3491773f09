import { renderMarkdownEmail, renderTemplate, type ProjectDesign, type RenderedEmail, type TemplateInput, type TemplateProps } from '../render/index.js';

export type RenderedContent = RenderedEmail;

/**
 * Templates and markdown are rendered at accept time (images as cid inline attachments) so delivery
 * composes the message from stored data only and a later template edit never changes a queued email.
 */
export function renderTemplateEmail(template: TemplateInput, props: TemplateProps, design: ProjectDesign, { broadcast = false } = {}): RenderedContent {
  return renderTemplate(template, props, design, { imageMode: 'cid', broadcast });
}

/** A subject in the markdown's front matter wins over the request's (renderer rule). */
export function renderMarkdown(markdown: string, props: TemplateProps, design: ProjectDesign, subject: string | undefined): RenderedContent {
  return renderMarkdownEmail(markdown, props, design, { imageMode: 'cid', subject });
}
