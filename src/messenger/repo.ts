import { and, asc, count, desc, eq, gt, inArray, lte, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { contacts, deliveryJobs, emails, messengerDrafts, messengerUnsubscribes } from '../db/schema/index.js';
import type { StoredContactProp } from '../db/schema/contacts.js';
import type { DraftStatus } from '../db/schema/messenger.js';

export type DraftRow = typeof messengerDrafts.$inferSelect;
export type NewDraftRow = typeof messengerDrafts.$inferInsert;
export type DraftRowPatch = Partial<Omit<NewDraftRow, 'id' | 'projectId' | 'createdAt'>>;

export interface DraftStats {
  totalRecipients: number;
  unsubscribedTotal: number;
  deliveriesTotal: number;
  complaintsTotal: number;
  bouncesTotal: number;
  uniqueOpensTotal: number;
}

/** A recipient as the expansion reads it: only what an email needs. */
export interface RecipientRow {
  id: string;
  emailAddress: string;
  timezone: string | null;
  customProps: Record<string, StoredContactProp>;
}

/** A page of recipients (recipientsAfter), how far it looked, and whether it reached the project's last contact. */
export interface RecipientPage {
  rows: RecipientRow[];
  lookedThrough: string | null;
  last: boolean;
}

/** Synchronous drizzle queries for Messenger drafts (DESIGN convention 6); every API query is scoped by project. */
export function createMessengerRepo(db: Db) {
  return {
    insert: (row: NewDraftRow) => db.insert(messengerDrafts).values(row).run(),

    /** A draft of the project; one being deleted is gone already. */
    find: (projectId: string, id: string): DraftRow | undefined =>
      db
        .select()
        .from(messengerDrafts)
        .where(and(eq(messengerDrafts.projectId, projectId), eq(messengerDrafts.id, id), eq(messengerDrafts.deleting, false)))
        .get(),

    /** Newest first (ids are time-ordered). */
    listPage: (projectId: string, offset: number, limit: number): DraftRow[] =>
      db.select().from(messengerDrafts).where(listed(projectId)).orderBy(desc(messengerDrafts.id)).limit(limit).offset(offset).all(),

    countAll: (projectId: string): number => db.select({ total: count() }).from(messengerDrafts).where(listed(projectId)).get()!.total,

    /** Updates the draft only while its status is one of `from`; false when it was not (changed meanwhile, or gone). */
    updateFrom: (id: string, from: readonly DraftStatus[], patch: DraftRowPatch): boolean =>
      db
        .update(messengerDrafts)
        .set(patch)
        .where(and(eq(messengerDrafts.id, id), inArray(messengerDrafts.status, [...from])))
        .run().changes > 0,

    /**
     * Takes a queued draft whose time has come for expansion, as it is now: a PATCH between the run's
     * listing and this write (a new time, subject, segment) is what gets sent, or keeps it waiting.
     */
    claimQueued: (id: string, nowMs: number): DraftRow | undefined =>
      db
        .update(messengerDrafts)
        .set({ status: 'processing', expandedThrough: null, updatedAt: nowMs })
        .where(and(eq(messengerDrafts.id, id), eq(messengerDrafts.status, 'queued'), lte(messengerDrafts.dueAt, nowMs), eq(messengerDrafts.deleting, false)))
        .returning()
        .get(),

    /** The first step of a deletion: the draft leaves the API, and its scheduled emails are never released. */
    markDeleting: (projectId: string, id: string): boolean =>
      db
        .update(messengerDrafts)
        .set({ deleting: true })
        .where(and(eq(messengerDrafts.projectId, projectId), eq(messengerDrafts.id, id), eq(messengerDrafts.deleting, false)))
        .run().changes > 0,

    /** Deletions a stop or a crash cut short. */
    listDeleting: (limit: number): DraftRow[] => db.select().from(messengerDrafts).where(eq(messengerDrafts.deleting, true)).limit(limit).all(),

    /**
     * Up to `limit` of a deleted broadcast's emails not sent yet, with their delivery jobs: those waiting
     * for a recipient's time, and those queued that no delivery has claimed (a claim sets the job's lease
     * in a write of its own, before or after this one: a claimed email is under way and goes out); how
     * many went.
     */
    deleteUnsentEmails: (draftId: string, limit: number): number =>
      db
        .delete(emails)
        .where(
          inArray(
            emails.id,
            db
              .select({ id: emails.id })
              .from(emails)
              .leftJoin(deliveryJobs, eq(deliveryJobs.emailId, emails.id))
              // By the broadcast's status index: the emails it delivered already are not read.
              .where(and(eq(emails.messengerId, draftId), inArray(emails.status, ['scheduled', 'queued']), sql`(${emails.status} = 'scheduled' or ${deliveryJobs.leaseUntil} is null)`))
              .limit(limit),
          ),
        )
        .run().changes,

    /** The last step of a deletion, once none of its scheduled emails is left. */
    deleteDraft: (id: string) => db.delete(messengerDrafts).where(eq(messengerDrafts.id, id)).run(),

    /**
     * Drafts the scheduler has work for at `nowMs`, earliest due first: queued and due, being expanded (a
     * refused one not before its retry time, so drafts that keep failing do not take every run), or
     * scheduled and past their last send.
     */
    listDue: (nowMs: number, limit: number): DraftRow[] =>
      db
        .select()
        .from(messengerDrafts)
        .where(
          sql`not ${messengerDrafts.deleting} and ${messengerDrafts.status} in ('queued', 'processing', 'scheduled') and ${messengerDrafts.dueAt} <= ${nowMs}`,
        )
        .orderBy(asc(messengerDrafts.dueAt))
        .limit(limit)
        .all(),

    /** The project's newest contact id (ids are time-ordered), null without contacts. */
    newestContactId: (projectId: string): string | null =>
      db.select({ id: sql<string | null>`max(${contacts.id})` }).from(contacts).where(eq(contacts.projectId, projectId)).get()?.id ?? null,

    /**
     * The next recipients after contact id `after`, in id order, among the project's contacts matching
     * `condition`, looking at no more than the `window` contacts after `after`; with the last contact id
     * looked at (null: none was). A condition that matches few contacts is read window by window, so no
     * single read holds the event loop for a scan of the whole project (tens of ms per 100,000 contacts).
     */
    recipientsAfter(projectId: string, condition: SQL | undefined, after: string | null, limit: number, window: number): RecipientPage {
      const afterCursor = after === null ? undefined : gt(contacts.id, after);
      const windowEnd =
        db.select({ id: contacts.id }).from(contacts).where(and(eq(contacts.projectId, projectId), afterCursor)).orderBy(asc(contacts.id)).limit(1).offset(window - 1).get()?.id ??
        null;
      const rows = db
        .select({ id: contacts.id, emailAddress: contacts.emailAddress, timezone: contacts.timezone, customProps: contacts.customProps })
        .from(contacts)
        .where(and(eq(contacts.projectId, projectId), afterCursor, windowEnd === null ? undefined : lte(contacts.id, windowEnd), condition))
        .orderBy(asc(contacts.id))
        .limit(limit)
        .all();
      // A full page stops at its last row; otherwise the whole window was looked at, or every contact after `after`.
      if (rows.length === limit) return { rows, lookedThrough: rows[rows.length - 1].id, last: false };
      if (windowEnd !== null) return { rows, lookedThrough: windowEnd, last: false };
      return { rows, lookedThrough: rows.at(-1)?.id ?? null, last: true };
    },

    /**
     * Which of `addresses` this broadcast has an email for already: a contact deleted and added again
     * while the broadcast was being expanded has a new id, after the batch that reached it first.
     */
    addressesReached: (projectId: string, draftId: string, addresses: string[]): Set<string> =>
      new Set(
        // By address: the broadcast's own index would read every email it has so far, at every batch.
        db
          .all<{ to_address: string }>(
            sql`select to_address from emails indexed by emails_project_to_nocase_idx
                 where project_id = ${projectId} and to_address collate nocase in ${addresses} and messenger_id = ${draftId}`,
          )
          .map((row) => row.to_address.toLowerCase()),
      ),

    /** The latest send time of the draft's emails still scheduled (timezone scheduling), null when none is. */
    lastScheduledSend: (projectId: string, draftId: string): number | null =>
      db
        .select({ last: sql<number | null>`max(${emails.scheduledAt})` })
        .from(emails)
        .where(and(eq(emails.projectId, projectId), eq(emails.messengerId, draftId), eq(emails.status, 'scheduled')))
        .get()?.last ?? null,

    /**
     * spec §2.10 stats, from the broadcast's emails, counted by status (index emails_messenger_status_idx).
     * Delivered counts every email that reached its recipient, whatever happened next (opened, reported
     * as spam). An email's first open moves it to `open`; one whose status moved on since (a complaint,
     * a late bounce) is counted from its events: few emails, read one by one.
     */
    stats: (draftId: string, unsubscribedTotal: number): DraftStats => {
      const byStatus = new Map<string, number>(
        db
          .select({ status: emails.status, total: count() })
          .from(emails)
          .where(eq(emails.messengerId, draftId))
          .groupBy(emails.status)
          .all()
          .map((row) => [row.status, row.total]),
      );
      const of = (...statuses: string[]) => statuses.reduce((sum, status) => sum + (byStatus.get(status) ?? 0), 0);
      const openedThenMovedOn = db
        .select({ total: count() })
        .from(emails)
        .where(
          and(
            eq(emails.messengerId, draftId),
            inArray(emails.status, ['complaint', 'bounce']),
            sql`exists (select 1 from email_events ev where ev.email_id = ${emails.id} and ev.type = 'open')`,
          ),
        )
        .get()!.total;
      return {
        totalRecipients: [...byStatus.values()].reduce((sum, total) => sum + total, 0),
        unsubscribedTotal,
        deliveriesTotal: of('delivered', 'open', 'complaint'),
        complaintsTotal: of('complaint'),
        bouncesTotal: of('bounce'),
        uniqueOpensTotal: of('open') + openedThenMovedOn,
      };
    },

    /** Unsubscribes the contact; true when it was subscribed (the caller counts it for the broadcast). */
    unsubscribeContact: (projectId: string, contactId: string, nowMs: number): boolean =>
      db
        .update(contacts)
        .set({ isSubscribed: false, unsubscribedAt: nowMs, updatedAt: nowMs })
        .where(and(eq(contacts.projectId, projectId), eq(contacts.id, contactId), eq(contacts.isSubscribed, true)))
        .run().changes > 0,

    /** Counts the contact's unsubscribe for the broadcast, the first time only; false when it was counted already (or the draft is gone). */
    countUnsubscribe: (draftId: string, contactId: string, nowMs: number): boolean => {
      // From the draft's row: the link outlives a deleted draft, and then there is nothing to count.
      const first =
        db.run(
          sql`insert or ignore into ${messengerUnsubscribes} (draft_id, contact_id, created_at) select id, ${contactId}, ${nowMs} from ${messengerDrafts} where id = ${draftId}`,
        ).changes > 0;
      if (first) db.update(messengerDrafts).set({ unsubscribedTotal: sql`${messengerDrafts.unsubscribedTotal} + 1` }).where(eq(messengerDrafts.id, draftId)).run();
      return first;
    },

    /**
     * The contact a link is for: the one at the address the email went to (the same contact, or one
     * deleted and added again since, with a new id); by its id for a link that names no address (sent
     * before links carried it). Not by id first: a contact moved to another address since (its
     * identifier) was shown, and unsubscribed, at its new address by whoever held the old email.
     */
    findContact: (projectId: string, contactId: string, emailKey: string | undefined) => {
      const contactWhere = (condition: SQL) =>
        db.select({ id: contacts.id, emailAddress: contacts.emailAddress, isSubscribed: contacts.isSubscribed }).from(contacts).where(and(eq(contacts.projectId, projectId), condition)).get();
      return contactWhere(emailKey === undefined ? eq(contacts.id, contactId) : eq(contacts.emailKey, emailKey));
    },
  };
}

export type MessengerRepo = ReturnType<typeof createMessengerRepo>;

/** The drafts the API shows: the project's, less those being deleted. */
function listed(projectId: string): SQL | undefined {
  return and(eq(messengerDrafts.projectId, projectId), eq(messengerDrafts.deleting, false));
}
