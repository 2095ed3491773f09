import { and, asc, count, desc, eq, inArray, isNull, lt, lte, or, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { domains, emails, messengerDrafts, retiredSigningKeys } from '../db/schema/index.js';
import { projectNotDeleting } from '../projects/repo.js';

export type DomainRow = typeof domains.$inferSelect;
export type NewDomainRow = typeof domains.$inferInsert;
export type RetiredSigningKeyRow = typeof retiredSigningKeys.$inferSelect;
export type DomainPatch = Partial<Pick<DomainRow, 'status' | 'dkimVerified' | 'mailFromStatus' | 'verification' | 'lastCheckedAt' | 'verifiedAt'>>;

/** Synchronous drizzle queries for sending domains (DESIGN convention 6). Every read is scoped to a project. */
export function createDomainsRepo(db: Db) {
  // Prepared once: building a drizzle query costs ~0.2 ms here, running a prepared one ~6 µs, and the send
  // API and delivery look a domain up for every email.
  const byName = db
    .select()
    .from(domains)
    .where(and(eq(domains.projectId, sql.placeholder('projectId')), eq(domains.domain, sql.placeholder('domain'))))
    .prepare();
  return {
    listByProject: (projectId: string): DomainRow[] => db.select().from(domains).where(eq(domains.projectId, projectId)).orderBy(asc(domains.id)).all(),
    countByProject: (projectId: string): number => db.select({ n: count() }).from(domains).where(eq(domains.projectId, projectId)).get()!.n,
    findById: (projectId: string, id: string): DomainRow | undefined =>
      db
        .select()
        .from(domains)
        .where(and(eq(domains.projectId, projectId), eq(domains.id, id)))
        .get(),
    findByName: (projectId: string, domain: string): DomainRow | undefined => byName.get({ projectId, domain }),
    /** Domains of the project named exactly one of `names` (an address's domain and its parents), in that order. */
    findByNames: (projectId: string, names: string[]): DomainRow[] =>
      names.map((domain) => byName.get({ projectId, domain })).filter((row): row is DomainRow => row !== undefined),
    insert: (row: NewDomainRow) => db.insert(domains).values(row).run(),
    update: (id: string, patch: DomainPatch) => db.update(domains).set(patch).where(eq(domains.id, id)).run().changes,
    delete: (projectId: string, id: string) =>
      db
        .delete(domains)
        .where(and(eq(domains.projectId, projectId), eq(domains.id, id)))
        .run().changes,
    /**
     * The senders of the project's scheduled emails at the domain or one of its subdomains, with how
     * many emails each. LIKE is ASCII case-insensitive in SQLite, as domain names are; validated names
     * hold no % or _.
     */
    listScheduledSenders: (projectId: string, domain: string): { fromAddress: string; count: number }[] =>
      db
        .select({ fromAddress: emails.fromAddress, count: sql<number>`count(*)` })
        .from(emails)
        .where(
          and(
            eq(emails.projectId, projectId),
            eq(emails.status, 'scheduled'),
            or(sql`${emails.fromAddress} LIKE ${'%@' + domain}`, sql`${emails.fromAddress} LIKE ${'%@%.' + domain}`),
          ),
        )
        .groupBy(emails.fromAddress)
        .all(),
    /**
     * The senders of the project's broadcasts still to be sent out (queued, or being expanded: their
     * emails are not made yet) at the domain or one of its subdomains, with how many broadcasts each.
     */
    listBroadcastSenders: (projectId: string, domain: string): { fromAddress: string; count: number }[] =>
      db
        .select({ fromAddress: sql<string>`${messengerDrafts.fromAddress}`, count: sql<number>`count(*)` })
        .from(messengerDrafts)
        .where(
          and(
            eq(messengerDrafts.projectId, projectId),
            inArray(messengerDrafts.status, ['queued', 'processing']),
            eq(messengerDrafts.deleting, false),
            or(sql`${messengerDrafts.fromAddress} LIKE ${'%@' + domain}`, sql`${messengerDrafts.fromAddress} LIKE ${'%@%.' + domain}`),
          ),
        )
        .groupBy(messengerDrafts.fromAddress)
        .all(),
    /**
     * Domains whose last check is older than their status's re-check interval, oldest check first. Not
     * those of a project whose deletion is under way (its mark, projects/repo.ts deletingMark): their
     * check's write would be refused (projects/deletion-guard.ts), and they go with the project.
     * Every term names the statuses it covers, the never-checked one too (every status, listed): each is
     * then a range of domains_status_checked_idx holding only due domains (MULTI-INDEX OR). Without a
     * status, `last_checked_at is null` could use no index, and SQLite read every domain row, DKIM keys
     * and all, to compare its last check: ~30 ms of the event loop every minute for 1,000 domains.
     */
    listDueForCheck: (unverifiedBefore: number, verifiedBefore: number, limit: number): DomainRow[] =>
      db
        .select()
        .from(domains)
        .where(
          and(
            or(
              and(inArray(domains.status, domains.status.enumValues), isNull(domains.lastCheckedAt)),
              and(inArray(domains.status, ['pending', 'failed']), lte(domains.lastCheckedAt, unverifiedBefore)),
              and(eq(domains.status, 'success'), lte(domains.lastCheckedAt, verifiedBefore)),
            ),
            projectNotDeleting(domains.projectId),
          ),
        )
        .orderBy(asc(domains.lastCheckedAt))
        .limit(limit)
        .all(),
    /** Keeps a deleted domain's key for its queued mail (schema: retiredSigningKeys). */
    retireKey: (row: RetiredSigningKeyRow) =>
      db
        .insert(retiredSigningKeys)
        .values(row)
        .onConflictDoUpdate({ target: [retiredSigningKeys.projectId, retiredSigningKeys.domain, retiredSigningKeys.selector], set: { retiredAt: row.retiredAt } })
        .run(),
    /** Retired keys of the project for exactly one of `names`, latest retirement first. */
    findRetiredKeys: (projectId: string, names: string[]): RetiredSigningKeyRow[] =>
      db
        .select()
        .from(retiredSigningKeys)
        .where(and(eq(retiredSigningKeys.projectId, projectId), inArray(retiredSigningKeys.domain, names)))
        .orderBy(desc(retiredSigningKeys.retiredAt))
        .all(),
    /**
     * The projects with kept keys retired before `retiredBefore`: a range of the retired_at index (asked
     * for distinct rows, SQLite read every kept key, private keys and all, in primary-key order instead).
     */
    projectsWithKeysRetiredBefore: (retiredBefore: number): string[] => [
      ...new Set(
        db
          .select({ projectId: retiredSigningKeys.projectId })
          .from(retiredSigningKeys)
          .where(lt(retiredSigningKeys.retiredAt, retiredBefore))
          .all()
          .map((row) => row.projectId),
      ),
    ],
    /**
     * Deletes the kept keys retired before `retiredBefore` of the projects in `earliestQueued` whose
     * earliest queued job (null: none) was queued after the key's retirement: mail can wait past
     * give_up_after (held by the suspension rule, the appliance stopped for days, a destination cooling
     * down), and a key forgotten under it sent that mail unsigned. Keys of other projects are left: their
     * queue was not looked at (domains/retired-keys.ts reads it).
     */
    deleteRetiredKeys: (retiredBefore: number, earliestQueued: Map<string, number | null>): number =>
      db
        .delete(retiredSigningKeys)
        .where(
          and(
            lt(retiredSigningKeys.retiredAt, retiredBefore),
            sql`exists (select 1 from json_each(${JSON.stringify(Object.fromEntries(earliestQueued))}) q
                         where q.key = ${retiredSigningKeys.projectId} and (q.value is null or ${retiredSigningKeys.retiredAt} < q.value))`,
          ),
        )
        .run().changes,
  };
}

export type DomainsRepo = ReturnType<typeof createDomainsRepo>;
