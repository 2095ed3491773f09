import type { Db } from '../db/client.js';
import type { StoredContactProp } from '../db/schema/contacts.js';
import type { Writes } from '../db/write-queue.js';
import type { Clock } from '../lib/clock.js';
import { AppError, invalid } from '../lib/errors.js';
import { newId } from '../lib/ids.js';
import { refuseWhileProjectDeleting } from '../projects/deletion-guard.js';
import { normalizeAddress } from '../suppressions/repo.js';
import type { SearchRunner } from '../emails/search-runner.js';
import type { ContactPatch, ContactRow, ContactsRepo } from './repo.js';
import { contactLimits, type ListContactsInput, type QueryContactsInput, type UpsertContactInput } from './schemas.js';
import { contactUtcOffset } from '../lib/time-zone.js';

/** spec §2.9 contact object. Optional fields are present as null when unset, so clients can read them all. */
export interface ContactView {
  id: string;
  projectId: string;
  emailAddress: string;
  identifier: string | null;
  createdAt: string;
  updatedAt: string;
  timezone: string | null;
  timezoneUtcOffset: number | null;
  isSubscribed: boolean;
  subscribedAt: string | null;
  unsubscribedAt: string | null;
  sourceType: string;
  groups: string[];
  customProps: { keyName: string; value: string | number; updatedAt: string }[];
  note: string | null;
}

export interface ContactsService {
  upsert(projectId: string, input: UpsertContactInput): Promise<{ status: 'created' | 'updated' }>;
  /** `{contact: null}` when the project has no contact with that address (any case). */
  find(projectId: string, emailAddress: string): { contact: ContactView | null };
  list(projectId: string, input: ListContactsInput): { hasMore: boolean; paginationCursorNext: string | null; data: ContactView[] };
  query(projectId: string, input: QueryContactsInput): Promise<{ data: ContactView[]; pageCount: number; totalCount: number; hasMore: boolean }>;
  remove(projectId: string, emailAddress: string): Promise<{ deleted: boolean }>;
}

export function createContactsService(deps: { db: Db; repo: ContactsRepo; writes: Writes; clock: Clock; searches: Pick<SearchRunner, 'queryContacts'> }): ContactsService {
  const { repo, writes, clock, db } = deps;
  const view = (row: ContactRow) => toView(row, clock.nowMs());

  /**
   * spec §4.5: with an identifier the contact is the one that carries it, and its address changes to the
   * one sent; without one (or with one no contact carries yet) it is the contact with that address.
   */
  const upsertNow = (projectId: string, input: UpsertContactInput): { status: 'created' | 'updated' } => {
    refuseWhileProjectDeleting(db, projectId);
    const now = clock.nowMs();
    const emailKey = normalizeAddress(input.emailAddress);
    const existing = existingContact(repo, projectId, emailKey, input);
    recordPropertyTypes(repo, projectId, input.customProps ?? {}, now);
    if (!existing) {
      repo.insert(newContactRow(newId(clock), projectId, emailKey, input, now));
      return { status: 'created' };
    }
    repo.update(existing.id, contactPatch(existing, emailKey, input, now));
    return { status: 'updated' };
  };

  return {
    upsert: (projectId, input) => writes.run(() => upsertNow(projectId, input)),

    find(projectId, emailAddress) {
      const row = repo.findByEmailKey(projectId, normalizeAddress(emailAddress));
      return { contact: row ? view(row) : null };
    },

    list(projectId, input) {
      const rows = repo.listPage(projectId, input.paginationCursorNext, input.limit + 1);
      const page = rows.slice(0, input.limit);
      const hasMore = rows.length > input.limit;
      // The last page's cursor too (null only on an empty page): spec §4.5 ends a listing with empty `data`, and
      // the Node SDK drops a null cursor, so a client paging until `data` is empty restarted at page 1 forever.
      return { hasMore, paginationCursorNext: page.at(-1)?.id ?? null, data: page.map(view) };
    },

    // On a search thread (contacts/find.ts): a query of many rules reads every contact of the project.
    async query(projectId, input) {
      const { totalCount, rows } = await deps.searches.queryContacts(projectId, input, clock.nowMs());
      return {
        data: rows.map(view),
        pageCount: Math.ceil(totalCount / input.limit),
        totalCount,
        // COMPAT.md: query clients stop on a short page or on hasMore: false.
        hasMore: input.offset + rows.length < totalCount,
      };
    },

    async remove(projectId, emailAddress) {
      return { deleted: await writes.run(() => repo.deleteByEmailKey(projectId, normalizeAddress(emailAddress))) };
    },
  };
}

const duplicate = (message: string) => new AppError('resource-duplicate', message);

function existingContact(repo: ContactsRepo, projectId: string, emailKey: string, input: UpsertContactInput): ContactRow | undefined {
  const byIdentifier = input.identifier ? repo.findByIdentifier(projectId, input.identifier) : undefined;
  const byEmail = repo.findByEmailKey(projectId, emailKey);
  if (byIdentifier && byEmail && byIdentifier.id !== byEmail.id) {
    throw duplicate(`Another contact already has the emailAddress ${input.emailAddress}: the contact with identifier ${input.identifier} cannot take it.`);
  }
  if (!byIdentifier && byEmail?.identifier && input.identifier) {
    // Re-keying a contact silently would detach it from the caller's record that holds the old identifier.
    throw duplicate(`The contact with emailAddress ${input.emailAddress} has another identifier (${byEmail.identifier}).`);
  }
  return byIdentifier ?? byEmail;
}

/** spec §4.5: a value must match its property's data type; a property's first value fixes the type. */
function recordPropertyTypes(repo: ContactsRepo, projectId: string, props: Record<string, string | number | null>, now: number): void {
  const entries = Object.entries(props).filter((entry): entry is [string, string | number] => entry[1] !== null);
  if (entries.length === 0) return;
  const types = repo.propertyTypes(projectId);
  for (const [keyName, value] of entries) {
    const type = typeof value === 'number' ? 'number' : 'string';
    const known = types.get(keyName);
    if (known && known !== type) throw invalid(`Invalid body. customProps.${keyName}: must be a ${known} (the property holds ${known}s)`);
    if (!known) repo.addPropertyType(projectId, keyName, type, now);
  }
}

function newContactRow(id: string, projectId: string, emailKey: string, input: UpsertContactInput, now: number) {
  const isSubscribed = input.isSubscribed ?? true;
  return {
    id,
    projectId,
    emailAddress: input.emailAddress,
    emailKey,
    identifier: input.identifier ?? null,
    isSubscribed,
    subscribedAt: isSubscribed ? now : null,
    unsubscribedAt: isSubscribed ? null : now,
    timezone: input.timezone ?? null,
    sourceType: 'api',
    note: input.note ?? null,
    groups: unique(input.groups ?? []),
    customProps: mergeProps({}, input.customProps ?? {}, now),
    createdAt: now,
    updatedAt: now,
  };
}

/** What an update changes: only the fields sent; customProps merge (null removes one), groups are replaced. */
function contactPatch(existing: ContactRow, emailKey: string, input: UpsertContactInput, now: number): ContactPatch {
  const patch: ContactPatch = { emailAddress: input.emailAddress, emailKey, updatedAt: now };
  if (input.identifier) patch.identifier = input.identifier;
  if (input.isSubscribed !== undefined && input.isSubscribed !== null && input.isSubscribed !== existing.isSubscribed) {
    patch.isSubscribed = input.isSubscribed;
    if (input.isSubscribed) Object.assign(patch, { subscribedAt: now, unsubscribedAt: null });
    else patch.unsubscribedAt = now;
  }
  if (input.timezone !== undefined) patch.timezone = input.timezone;
  if (input.note !== undefined) patch.note = input.note;
  if (input.groups) patch.groups = unique(input.groups);
  if (input.customProps) patch.customProps = mergeProps(existing.customProps, input.customProps, now);
  return patch;
}

function mergeProps(current: Record<string, StoredContactProp>, changes: Record<string, string | number | null>, now: number): Record<string, StoredContactProp> {
  const merged = { ...current };
  for (const [keyName, value] of Object.entries(changes)) {
    if (value === null) delete merged[keyName];
    // A value sent again unchanged keeps the time it was set.
    else if (merged[keyName]?.value !== value) merged[keyName] = { value, updatedAt: now };
  }
  if (Object.keys(merged).length > contactLimits.propsMax) {
    throw invalid(`Invalid body. customProps: a contact holds at most ${contactLimits.propsMax} properties (remove some by setting them to null)`);
  }
  return merged;
}

function unique(values: string[]): string[] {
  return [...new Set(values)];
}

function toView(row: ContactRow, nowMs: number): ContactView {
  const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
  return {
    id: row.id,
    projectId: row.projectId,
    emailAddress: row.emailAddress,
    identifier: row.identifier,
    createdAt: new Date(row.createdAt).toISOString(),
    updatedAt: new Date(row.updatedAt).toISOString(),
    timezone: row.timezone,
    timezoneUtcOffset: contactUtcOffset(row.timezone, nowMs),
    isSubscribed: row.isSubscribed,
    subscribedAt: iso(row.subscribedAt),
    unsubscribedAt: iso(row.unsubscribedAt),
    sourceType: row.sourceType,
    groups: row.groups,
    customProps: Object.entries(row.customProps).map(([keyName, prop]) => ({ keyName, value: prop.value, updatedAt: new Date(prop.updatedAt).toISOString() })),
    note: row.note,
  };
}
