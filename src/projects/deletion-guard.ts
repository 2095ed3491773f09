import type { Db } from '../db/client.js';
import { readSetting } from '../db/settings.js';
import { deletedMeanwhile } from '../lib/errors.js';
import { deletingMark } from './repo.js';

/**
 * Refuses (409 conflict, as a send is refused: emails/accept-procedure.ts) a write of a project whose
 * deletion is under way. Its keys are revoked when the deletion begins, but a request authenticated just
 * before goes on, and its write committed while the purge ran (seconds for a large project) was answered
 * 201, then deleted with the project. Call it inside the write's own transaction (writes.run), before
 * the insert or update: the deletion's mark is written in one too, so the two are serialised and no
 * write slips in between a check and its commit.
 */
export function refuseWhileProjectDeleting(db: Db, projectId: string): void {
  if (readSetting(db, deletingMark(projectId)) !== undefined) throw deletedMeanwhile();
}
