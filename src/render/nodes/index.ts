import type { RenderContext } from '../context.js';
import { iterationScopes } from '../iteration.js';
import type { ContentNode } from '../types.js';
import { renderBox } from './box.js';
import { renderButton } from './button.js';
import { renderChart } from './chart.js';
import { renderCode } from './code.js';
import type { Placement } from './common.js';
import { renderDivider } from './divider.js';
import { renderImage } from './image.js';
import { renderList } from './list.js';
import { renderTable } from './table.js';
import { renderText } from './text.js';

/**
 * Renders a list of nodes as rows of the enclosing content table. Nodes with `iterationKey` repeat once
 * per item of that array (tables with `iterationTarget: "children"` repeat their first row instead).
 * Unknown node types are skipped so content saved by a newer editor still renders.
 */
export function renderNodes(ctx: RenderContext, nodes: unknown): string {
  if (!Array.isArray(nodes)) return '';
  let out = '';
  for (let i = 0; i < nodes.length; i++) {
    const node = nodes[i] as ContentNode;
    if (!node || typeof node !== 'object') continue;
    const last = i === nodes.length - 1;
    if (node.iterationKey && !(node.type === 'table' && node.iterationTarget === 'children')) {
      const scopes = iterationScopes(ctx, node.iterationKey);
      scopes.forEach((scope, k) => (out += renderNode(scope, node, { last: last && k === scopes.length - 1 })));
    } else {
      out += renderNode(ctx, node, { last });
    }
  }
  return out;
}

function renderNode(ctx: RenderContext, node: ContentNode, place: Placement): string {
  ctx.budget.spend();
  const html = renderNodeHtml(ctx, node, place);
  ctx.budget.produced(html.length);
  return html;
}

function renderNodeHtml(ctx: RenderContext, node: ContentNode, place: Placement): string {
  switch (node.type) {
    case 'text':
      return renderText(ctx, node, place);
    case 'button':
      return renderButton(ctx, node, place);
    case 'list':
      return renderList(ctx, node, place);
    case 'table':
      return renderTable(ctx, node, place);
    case 'divider':
      return renderDivider(ctx, node, place);
    case 'image':
      return renderImage(ctx, node, place);
    case 'chart':
      return renderChart(ctx, node, place);
    case 'code':
      return renderCode(ctx, node, place);
    case 'box':
      return renderBox(ctx, node, place, renderNodes);
    default:
      return '';
  }
}
