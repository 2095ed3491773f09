import type { Db } from '../db/client.js';
import type { ReceivedAddress, RouteResponseMode } from '../db/schema/inbound.js';
import type { Writes } from '../db/write-queue.js';
import { createDomainsRepo } from '../domains/repo.js';
import type { Clock } from '../lib/clock.js';
import { AppError, invalid, notFound } from '../lib/errors.js';
import { isId, newId } from '../lib/ids.js';
import type { UrlSigner } from '../lib/signing.js';
import { refuseWhileProjectDeleting } from '../projects/deletion-guard.js';
import type { InboundRepo, ReceivedRawRow, ReceivedRecordRow, ReceivedSummaryRow, RouteRow } from './repo.js';
import type { CreateRouteInput, ListReceivedInput, UpdateRouteInput } from './schemas.js';
import { lineEndingOf, traceHeaders } from './trace-headers.js';
import { boundedAddresses, boundedSubject } from './received-bounds.js';
import { authenticationResultsHeader } from './auth-verdicts.js';

/** spec §2.7 inbound route. */
export interface RouteView {
  id: string;
  domain: string;
  localPart: string;
  isCatchAll: boolean;
  responseMode: RouteResponseMode;
  isEnabled: boolean;
  createdAt: string;
  updatedAt: string;
}

/** spec §4.9: list entries are summaries with only these fields. */
export interface ReceivedSummaryView {
  id: string;
  destination: string;
  from: ReceivedAddress;
  to: ReceivedAddress[];
  cc: ReceivedAddress[];
  replyTo: ReceivedAddress[];
  subject: string;
  receivedAt: string;
  spam: { score: number };
  inboundRouteId: string;
}

export interface InboundService {
  listRoutes(projectId: string): { data: RouteView[] };
  createRoute(projectId: string, input: CreateRouteInput): Promise<{ created: RouteView }>;
  updateRoute(projectId: string, routeId: string, input: UpdateRouteInput): Promise<{ updated: RouteView }>;
  deleteRoute(projectId: string, routeId: string): Promise<{ deleted: boolean }>;
  listReceived(projectId: string, input: ListReceivedInput): { data: ReceivedSummaryView[]; hasMore: boolean; paginationCursorNext: string | null; paginationCursorPrev: string | null; limit: number };
  getReceived(projectId: string, id: string): Record<string, unknown>;
  /** The raw message or its html, for a signed link handed out by getReceived; undefined when invalid or expired. */
  readSignedFile(token: string): { body: Buffer | string; contentType: string; name?: string } | undefined;
}

export interface InboundServiceDeps {
  db: Db;
  repo: InboundRepo;
  writes: Writes;
  clock: Clock;
  signer: UrlSigner;
  /** Where signed links point (`http.public_url`, or the API's own address). */
  publicUrl: () => string;
  /** `sending.require_verified_domain`: false lets a sandbox route any domain. */
  requireVerifiedDomain: boolean;
  /** This host's name (smtp.hostname), the `by` of the trace a raw message is served with. */
  hostname: string;
}

/** Signed links to a received email's raw message and html are short-lived, as the email records' are. */
const fileLinkTtlMs = 60 * 60 * 1000;
export const inboundFilesPath = '/v1/inbound-files/';

export function createInboundService(deps: InboundServiceDeps): InboundService {
  const { db, repo, writes, clock, signer } = deps;
  const domains = createDomainsRepo(db);

  const ownRoute = (projectId: string, routeId: string): RouteRow => {
    const route = isId(routeId) ? repo.findRoute(projectId, routeId) : undefined;
    if (!route) throw notFound('Inbound route');
    return route;
  };

  /** spec §4.9: the route's domain is a verified domain of the project, or a subdomain of one. */
  const checkDomain = (projectId: string, domain: string) => {
    if (!deps.requireVerifiedDomain) return;
    const covering = domains.listByProject(projectId).filter((row) => domain === row.domain.toLowerCase() || domain.endsWith(`.${row.domain.toLowerCase()}`));
    if (covering.some((row) => row.status === 'success')) return;
    const pending = covering[0];
    throw invalid(
      pending
        ? `Invalid body. domain: ${domain} is under ${pending.domain}, whose status is ${pending.status}: verify it first (POST /v1/domains/${pending.id}/verify).`
        : `Invalid body. domain: ${domain} is not a verified domain of this project or a subdomain of one: add it with POST /v1/domains and publish its records.`,
    );
  };

  const links = (id: string) => {
    const expires = clock.nowMs() + fileLinkTtlMs;
    const base = `${deps.publicUrl()}${inboundFilesPath}`;
    return { raw: `${base}${signer.sign(`r:${id}`, expires)}`, html: `${base}${signer.sign(`h:${id}`, expires)}` };
  };

  return {
    listRoutes: (projectId) => ({ data: repo.listRoutes(projectId).map(routeView) }),

    createRoute(projectId, input) {
      return writes.run(() => {
        refuseWhileProjectDeleting(db, projectId);
        checkDomain(projectId, input.domain);
        if (repo.findRouteAt(input.domain, input.localPart)) {
          throw new AppError('resource-duplicate', `A route for ${input.localPart}@${input.domain} already exists.`);
        }
        const now = clock.nowMs();
        const row: RouteRow = { id: newId(clock), projectId, ...input, createdAt: now, updatedAt: now };
        repo.insertRoute(row);
        return { created: routeView(row) };
      });
    },

    updateRoute(projectId, routeId, input) {
      return writes.run(() => {
        refuseWhileProjectDeleting(db, projectId);
        const route = ownRoute(projectId, routeId);
        const patch = {
          responseMode: input.responseMode ?? route.responseMode,
          isEnabled: input.isEnabled ?? route.isEnabled,
          updatedAt: clock.nowMs(),
        };
        repo.updateRoute(route.id, patch);
        return { updated: routeView({ ...route, ...patch }) };
      });
    },

    // As every DELETE here (docs/errors.md): a route that does not exist answers {deleted: false}.
    async deleteRoute(projectId, routeId) {
      return { deleted: isId(routeId) && (await writes.run(() => repo.deleteRoute(projectId, routeId))) };
    },

    listReceived(projectId, input) {
      const { limit } = input;
      if (input.paginationCursorPrev) {
        // The page just newer than the cursor, read upwards and shown newest first.
        const newer = repo.receivedAfter(projectId, input.paginationCursorPrev, limit + 1);
        const page = newer.slice(0, limit).reverse();
        return {
          data: page.map(summaryView),
          hasMore: true, // the cursor's own email, at least, is older
          paginationCursorNext: page.at(-1)?.id ?? input.paginationCursorPrev,
          paginationCursorPrev: newer.length > limit ? page[0].id : null,
          limit,
        };
      }
      const older = repo.receivedBefore(projectId, input.paginationCursorNext, limit + 1);
      const page = older.slice(0, limit);
      const hasMore = older.length > limit;
      return {
        data: page.map(summaryView),
        hasMore,
        // Null only on an empty page, as for contacts (contacts/service.ts).
        paginationCursorNext: page.at(-1)?.id ?? null,
        // Past the first page there are newer emails: the cursor's own, at least.
        paginationCursorPrev: input.paginationCursorNext ? (page[0]?.id ?? input.paginationCursorNext) : null,
        limit,
      };
    },

    getReceived(projectId, id) {
      const row = isId(id) ? repo.findReceived(projectId, id) : undefined;
      if (!row) throw notFound('Received email');
      return fullView(row, links(row.id));
    },

    readSignedFile(token) {
      const payload = signer.verify(token, clock.nowMs());
      const [kind, id] = payload?.split(':') ?? [];
      if (!id) return undefined;
      if (kind === 'r') {
        const row = repo.findReceivedRaw(id);
        return row && { body: withTrace(row, id, deps.hostname), contentType: 'message/rfc822', name: `${id}.eml` };
      }
      const html = kind === 'h' ? repo.findReceivedHtml(id) : undefined;
      return html ? { body: html, contentType: 'text/html; charset=utf-8' } : undefined;
    },
  };
}

/** The raw message as this hop delivers it: its trace headers, then the bytes as they arrived. */
function withTrace(row: ReceivedRawRow, id: string, hostname: string): Buffer {
  const envelope = row.envelope as { mailFrom?: string; helo?: string; remoteAddress?: string; protocol?: string };
  const trace = traceHeaders(
    {
      mailFrom: envelope.mailFrom ?? '',
      helo: envelope.helo ?? '',
      remoteAddress: envelope.remoteAddress ?? '',
      protocol: envelope.protocol,
      receivedBy: hostname,
      id,
      destination: row.destination,
      receivedAtMs: row.receivedAt,
      authenticationResults: typeof row.auth.authenticationResults === 'string' ? row.auth.authenticationResults : '',
    },
    lineEndingOf(row.raw),
  );
  return Buffer.concat([Buffer.from(trace), row.raw]);
}

function routeView(row: RouteRow): RouteView {
  return {
    id: row.id,
    domain: row.domain,
    localPart: row.localPart,
    isCatchAll: row.localPart === '*',
    responseMode: row.responseMode,
    isEnabled: row.isEnabled,
    createdAt: new Date(row.createdAt).toISOString(),
    updatedAt: new Date(row.updatedAt).toISOString(),
  };
}

function summaryView(row: ReceivedSummaryRow): ReceivedSummaryView {
  return {
    id: row.id,
    destination: row.destination,
    // Bounded again: a row stored before the bounds (migration 0035) may hold a hostile list whole.
    ...boundedAddresses(row.addresses),
    subject: boundedSubject(row.subject),
    receivedAt: new Date(row.receivedAt).toISOString(),
    spam: { score: row.spam.score },
    inboundRouteId: row.inboundRouteId,
  };
}

/** spec §2.8 received email: the record the webhook carries too, with its headers and fresh links. */
function fullView(row: ReceivedRecordRow & { textTruncated: boolean }, links: { raw: string; html: string }): Record<string, unknown> {
  return {
    ...receivedEmailRecord(row),
    // Cut past recordTextMax (inbound/repo.ts); the raw message has all of it.
    ...(row.textTruncated ? { textTruncated: true } : {}),
    headers: row.headers,
    previewHtmlUrl: row.html !== null ? links.html : null,
    rawEmailUrl: links.raw,
  };
}

/**
 * A received email as the API and the `email.received` webhook show it, without its headers and links
 * (a webhook's links would expire before a retried delivery).
 */
/** The stored verdicts as the API shows them: `authenticationResults` is the one header it names. */
function presentAuth(auth: ReceivedRecordRow['auth']): ReceivedRecordRow['auth'] {
  if (typeof auth?.authenticationResults !== 'string') return auth;
  return { ...auth, authenticationResults: authenticationResultsHeader(auth.authenticationResults) };
}

export function receivedEmailRecord(row: Omit<ReceivedRecordRow, 'headers'>): Record<string, unknown> {
  return {
    id: row.id,
    destination: row.destination,
    ...boundedAddresses(row.addresses),
    subject: boundedSubject(row.subject),
    text: row.text,
    htmlAvailable: row.html !== null,
    attachments: row.attachments,
    auth: presentAuth(row.auth),
    envelope: row.envelope,
    inboundRouteId: row.inboundRouteId,
    spam: row.spam,
    receivedAt: new Date(row.receivedAt).toISOString(),
  };
}
