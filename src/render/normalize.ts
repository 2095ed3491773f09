import type { z } from 'zod';
import { AppError } from '../lib/errors.js';
import { maxBoxDepth } from './nodes/box.js';
import { contentSchema } from './schema.js';
import type { ContentNode } from './types.js';

/**
 * Validates template content against the node schema and gives every node a unique id (spec §4.6: ids
 * are generated when missing or duplicated, nested box columns included). Errors name the path the way
 * clients see their JSON: `content[3].columns[0].elements[1].url: must be ...`.
 */
export function normalizeContent(content: unknown): ContentNode[] {
  if (content === undefined || content === null) return [];
  const parsed = contentSchema.safeParse(content);
  if (!parsed.success) throw new AppError('parameters-invalid', describeIssues(parsed.error.issues));
  const nodes = parsed.data as ContentNode[];
  checkDepth(nodes, 'content', 0);
  assignIds(nodes);
  return nodes;
}

function describeIssues(issues: z.core.$ZodIssue[]): string {
  const shown = issues.slice(0, 5).map((issue) => `${formatPath(['content', ...issue.path])}: ${issueMessage(issue)}`);
  const more = issues.length > shown.length ? ` (and ${issues.length - shown.length} more)` : '';
  return `Invalid template content: ${shown.join('; ')}${more}.`;
}

function issueMessage(issue: z.core.$ZodIssue): string {
  if (issue.code === 'invalid_union' && 'discriminator' in issue) {
    const options = (issue as { options?: unknown[] }).options ?? [];
    return `unknown node type; expected one of ${options.join(', ')}`;
  }
  return issue.message;
}

/** `['content', 3, 'columns', 0, 'url']` → `content[3].columns[0].url`. */
export function formatPath(path: PropertyKey[]): string {
  return path.reduce<string>((out, key) => (typeof key === 'number' ? `${out}[${key}]` : out === '' ? String(key) : `${out}.${String(key)}`), '');
}

function checkDepth(nodes: ContentNode[], path: string, depth: number): void {
  nodes.forEach((node, i) => {
    if (node.type !== 'box') return;
    if (depth + 1 > maxBoxDepth) throw new AppError('parameters-invalid', `Invalid template content: ${path}[${i}]: boxes nest at most ${maxBoxDepth} deep.`);
    node.columns.forEach((column, c) => checkDepth(column.elements, `${path}[${i}].columns[${c}].elements`, depth + 1));
  });
}

/** Depth-first, document order: the first holder of an id keeps it, later duplicates get a new one. */
function assignIds(nodes: ContentNode[]): void {
  const all = [...walk(nodes)];
  const taken = new Set(all.map((n) => n.id).filter((id): id is string => typeof id === 'string' && id !== ''));
  const seen = new Set<string>();
  const counters = new Map<string, number>();
  for (const node of all) {
    if (typeof node.id === 'string' && node.id !== '' && !seen.has(node.id)) {
      seen.add(node.id);
      continue;
    }
    let id: string;
    do {
      const n = (counters.get(node.type) ?? 0) + 1;
      counters.set(node.type, n);
      id = `${node.type}-${n}`;
    } while (taken.has(id));
    taken.add(id);
    seen.add(id);
    node.id = id;
  }
}

function* walk(nodes: ContentNode[]): Generator<ContentNode> {
  for (const node of nodes) {
    yield node;
    if (node.type === 'box') for (const column of node.columns) yield* walk(column.elements);
  }
}
