import type { Db } from '../db/client.js';
import { contactQueryCondition } from './query.js';
import { createContactsRepo, type ContactRow } from './repo.js';
import type { QueryContactsInput } from './schemas.js';

/** One page of a contact query and how many contacts match in all (spec §4.5). */
export interface ContactQueryPage {
  rows: ContactRow[];
  totalCount: number;
}

/**
 * Runs a contact query (contacts/query.ts) on `db`: on a search thread's own read connection
 * (emails/search-runner.ts), or inline where there is none. Counting and paging read every matching
 * contact, so it must not hold the event loop: 50 text rules over 100,000 contacts take a second or two.
 */
export function findContacts(db: Db, projectId: string, input: QueryContactsInput, nowMs: number): ContactQueryPage {
  const repo = createContactsRepo(db);
  const types = repo.propertyTypes(projectId);
  const condition = contactQueryCondition(input, { propertyType: (keyName) => types.get(keyName), nowMs, timeZones: () => repo.timeZones(projectId) });
  return { totalCount: repo.countMatching(projectId, condition), rows: repo.queryPage(projectId, condition, input.offset, input.limit) };
}
