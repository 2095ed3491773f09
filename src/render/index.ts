/**
 * The rendering engine (issue 3): template or markdown + props + project design → {subject, html, text,
 * inlineImages}. Pure functions; the templates API, send path and previews build on these.
 */
export type {
  BoxNode,
  ButtonNode,
  ChartNode,
  CodeLanguage,
  CodeNode,
  ContentNode,
  DividerNode,
  ImageNode,
  InlineImage,
  ListNode,
  NodeStyles,
  ProjectDesign,
  RenderedEmail,
  RenderOptions,
  TableNode,
  TemplateInput,
  TemplateProps,
  TextNode,
} from './types.js';
export { codeLanguages } from './types.js';
export { renderTemplate, withinLineLimit } from './render-template.js';
export { renderMarkdownEmail } from './markdown-email.js';
export { substituteKnownVariables, substituteVariables } from './variables.js';
export { normalizeContent } from './normalize.js';
export { fontStack } from '../templates/fonts.js';
export { renderHtmlInLayout } from './html-in-layout.js';
