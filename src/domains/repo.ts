import { and, asc, desc, eq, inArray, isNull, lt, lte, or, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { domains, emails, retiredSigningKeys } from '../db/schema/index.js';
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
     * Domains whose last check is older than their status's re-check interval, oldest check first. Not
     * those of a project whose deletion is under way (its mark, projects/repo.ts deletingMark): their
     * check's write would be refused (projects/deletion-guard.ts), and they go with the project.
     */
    listDueForCheck: (unverifiedBefore: number, verifiedBefore: number, limit: number): DomainRow[] =>
      db
        .select()
        .from(domains)
        .where(
          and(
            or(
              isNull(domains.lastCheckedAt),
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
     * Kept keys retired before `retiredBefore`, except those whose project still has mail queued before the
     * retirement: mail can wait past give_up_after (held by the suspension rule, the appliance stopped
     * for days, a destination cooling down), and a key forgotten under it sent that mail unsigned.
     */
    pruneRetiredKeys: (retiredBefore: number): number =>
      db
        .delete(retiredSigningKeys)
        .where(
          and(
            lt(retiredSigningKeys.retiredAt, retiredBefore),
            sql`not exists (select 1 from delivery_jobs j where j.project_id = ${retiredSigningKeys.projectId} and j.queued_at <= ${retiredSigningKeys.retiredAt})`,
          ),
        )
        .run().changes,
  };
}

export type DomainsRepo = ReturnType<typeof createDomainsRepo>;
