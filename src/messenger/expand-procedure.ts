import type { Sqlite } from '../db/client.js';
import { createAcceptProcedure, type AcceptArgs, type SendResult } from '../emails/accept-procedure.js';
import { AppError } from '../lib/errors.js';

export interface ExpandArgs {
  draftId: string;
  /** The draft's `expanded_through` this batch continues from; null for the first batch. */
  from: string | null;
  /** The last contact id of this batch. */
  through: string;
  accept: AcceptArgs;
}

/** Thrown when the draft is no longer being expanded from `from`: deleted (or being deleted), or expanded by another run. */
export const expansionSuperseded = 'the draft changed while its recipients were being added';

/**
 * Write procedure (write-procedures.ts): one batch of a broadcast. Its emails (as any accepted email:
 * emails/accept-procedure.ts) and the draft's progress commit together, so after a crash the expansion
 * resumes after the last batch it committed: no recipient gets two copies, none is skipped.
 */
export function createExpandProcedure(sqlite: Sqlite): (args: ExpandArgs) => SendResult[] {
  const accept = createAcceptProcedure(sqlite);
  const draft = sqlite.prepare(`select status, expanded_through, deleting from messenger_drafts where id = ?`);
  const advance = sqlite.prepare(`update messenger_drafts set expanded_through = ?, last_error = null, updated_at = ? where id = ?`);
  return ({ draftId, from, through, accept: args }) => {
    const row = draft.get(draftId) as { status: string; expanded_through: string | null; deleting: number } | undefined;
    if (!row || row.deleting || row.status !== 'processing' || row.expanded_through !== from) throw new AppError('conflict', expansionSuperseded);
    const results = accept(args);
    advance.run(through, args.nowMs, draftId);
    return results;
  };
}
