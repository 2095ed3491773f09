import { codeBlockHtml } from '../code-block.js';
import type { RenderContext } from '../context.js';
import { codeLanguage } from '../highlight.js';
import type { CodeNode } from '../types.js';
import { substituteKnownVariables } from '../variables.js';
import { nodeRow, type Placement } from './common.js';

/**
 * Code is shown verbatim: only variables that exist in the props are replaced, because code is full of
 * braces (`function () {}`, `{ key }`) that must not turn into bare names.
 */
export function renderCode(ctx: RenderContext, node: CodeNode, place: Placement): string {
  const code = substituteKnownVariables(typeof node.code === 'string' ? node.code : '', ctx.props);
  return nodeRow(ctx, node.styles, codeBlockHtml(code, codeLanguage(node.language)), place);
}
