import type { Db } from '../db/client.js';
import type { Writes } from '../db/write-queue.js';
import type { Clock } from '../lib/clock.js';
import { AppError } from '../lib/errors.js';
import { refuseWhileProjectDeleting } from '../projects/deletion-guard.js';
import { addSuppression, findSuppression, listSuppressions, normalizeAddress, removeSuppression, type SuppressionRow } from './repo.js';
import type { AddSuppressionInput, ListSuppressionsInput } from './schemas.js';

/** The suppression list API (extension): addresses a project will not send to again. */
export interface SuppressionView {
  emailAddress: string;
  reason: string;
  detail: string | null;
  createdAt: string;
}

export interface SuppressionsService {
  list(projectId: string, input: ListSuppressionsInput): { data: SuppressionView[]; hasMore: boolean; paginationCursorNext: string | null };
  /** One address (any case): whether, why and since when it is suppressed; `null` when it is not. */
  get(projectId: string, emailAddress: string): { suppression: SuppressionView | null };
  add(projectId: string, input: AddSuppressionInput): Promise<{ suppression: SuppressionView; status: 'created' | 'exists' }>;
  remove(projectId: string, emailAddress: string): Promise<{ deleted: boolean }>;
}

export function createSuppressionsService(deps: { db: Db; writes: Writes; clock: Clock }): SuppressionsService {
  const { db, writes, clock } = deps;
  return {
    list(projectId, input) {
      const before = decodeCursor(input.paginationCursorNext);
      const rows = listSuppressions(db, projectId, input.limit + 1, before);
      const page = rows.slice(0, input.limit);
      const hasMore = rows.length > input.limit;
      const last = page[page.length - 1];
      return { data: page.map(toView), hasMore, paginationCursorNext: hasMore && last ? encodeCursor(last) : null };
    },
    get(projectId, emailAddress) {
      const row = findSuppression(db, projectId, normalizeAddress(emailAddress));
      return { suppression: row ? toView(row) : null };
    },
    add(projectId, input) {
      return writes.run(() => {
        refuseWhileProjectDeleting(db, projectId);
        const existing = findSuppression(db, projectId, input.emailAddress);
        if (existing) return { suppression: toView(existing), status: 'exists' as const };
        addSuppression(db, { projectId, emailAddress: input.emailAddress, reason: input.reason ?? 'manual', detail: input.detail, createdAt: clock.nowMs() });
        return { suppression: toView(findSuppression(db, projectId, input.emailAddress)!), status: 'created' as const };
      });
    },
    async remove(projectId, emailAddress) {
      return { deleted: await writes.run(() => removeSuppression(db, projectId, normalizeAddress(emailAddress))) };
    },
  };
}

function toView(row: SuppressionRow): SuppressionView {
  return { emailAddress: row.emailAddress, reason: row.reason, detail: row.detail, createdAt: new Date(row.createdAt).toISOString() };
}

function encodeCursor(row: SuppressionRow): string {
  return Buffer.from(JSON.stringify([row.createdAt, row.emailAddress])).toString('base64url');
}

function decodeCursor(cursor: string | undefined): { createdAt: number; emailAddress: string } | undefined {
  if (!cursor) return undefined;
  try {
    const [createdAt, emailAddress] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as [unknown, unknown];
    if (typeof createdAt === 'number' && typeof emailAddress === 'string') return { createdAt, emailAddress };
  } catch {
    // fall through
  }
  throw new AppError('parameters-invalid', 'Invalid query. paginationCursorNext: not a cursor returned by this API');
}
