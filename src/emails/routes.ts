import { createHash } from 'node:crypto';
import { RawResponse, type RequestContext, type Routes } from '../http/router.js';
import { invalidLinkPage, recipientPage, recipientPageResponse } from '../http/recipient-page.js';
import { escapeHtml } from '../render/escape.js';
import { jsonObjectBody, parseInput, queryFallbacks } from '../http/validate.js';
import { AppError } from '../lib/errors.js';
import { searchEmailsFields, searchEmailsSchema } from './schemas.js';
import type { ClickTarget, EmailsService, SendOptions } from './service.js';
import { clickPath, openPath, pixelGif, redirectTarget } from './tracking.js';

/** The search's fields a query string may carry, with the body's rules. */
const searchQueryStringSchema = searchEmailsFields.pick({ paginationCursorNext: true, paginationCursorPrev: true, limit: true });

const noStore = { 'cache-control': 'no-store, no-cache, must-revalidate, private', pragma: 'no-cache' };

/**
 * Stored html is the sender's, served from the API's origin: no scripts, no forms, no sniffing. Links
 * that open a new tab still do (`allow-popups`; every link the renderer writes has target="_blank"),
 * and the site they open is not sandboxed in turn (`allow-popups-to-escape-sandbox`): a click is the
 * reader's own navigation, and browsers open target="_blank" without an opener (implicit noopener).
 * Stylesheets load from anywhere, as images and fonts do: a design's web font is a Google Fonts
 * stylesheet the layout links (render/layout.ts), and a stylesheet runs nothing in a sandbox.
 */
const signedFilePolicy = "sandbox allow-popups allow-popups-to-escape-sandbox; default-src 'none'; img-src * data:; style-src 'unsafe-inline' *; font-src *";

export function registerEmailRoutes(routes: Routes, emails: EmailsService): void {
  // Spec §4.2: one object, or a JSON array of up to 50 (COMPAT.md "Email": batch on the same path).
  routes.post('/v1/email/send', async (ctx) => {
    const body = await ctx.json();
    const answer = await withIdempotency<unknown>(ctx, emails, '/v1/email/send', body, (options) =>
      Array.isArray(body) ? emails.sendBatch(ctx.project.id, body, options) : emails.send(ctx.project.id, body as never, options),
    );
    return Array.isArray(answer) ? answer.map(compatibleSendAnswer) : compatibleSendAnswer(answer);
  });

  routes.post('/v1/mail/send', async (ctx) => {
    const body = await ctx.json();
    return compatibleSendAnswer(await withIdempotency(ctx, emails, '/v1/mail/send', body, (options) => emails.sendLegacy(ctx.project.id, body, options)));
  });

  routes.post('/v1/email/search', async (ctx) => {
    const body = jsonObjectBody(await ctx.json());
    // Cursors and limit may come in the query string too (COMPAT.md "Transport"); the body wins.
    const fromQuery = queryFallbacks(ctx.query, body, ['paginationCursorNext', 'paginationCursorPrev', 'limit']);
    // Checked as the query first, so that a bad `?limit=abc` is named where the client put it: checked
    // only with the body, it was "Invalid body. limit: …" for a body that had no limit.
    parseInput(searchQueryStringSchema, fromQuery, 'query');
    const input = parseInput(searchEmailsSchema, { ...fromQuery, ...body });
    return emails.search(ctx.project.id, input);
  });

  routes.get('/v1/email/:id', (ctx) => ({ email: emails.findEmail(ctx.project.id, ctx.params.id) }));

  routes.delete('/v1/email/:id', async (ctx) => ({ deleted: await emails.deleteEmail(ctx.project.id, ctx.params.id) }));

  // Signed, short-lived links handed out in email records (htmlReferenceUrl, attachments[].fileUrl).
  const serveSignedFile = (ctx: RequestContext<null>) => signedFileResponse(emails.readSignedFile(ctx.params.token), signedFilePolicy);
  routes.public('get', '/v1/email-files/:token', serveSignedFile);
  // A download link has no side effect: HEAD answers its headers (size, type, name), like any GET here.
  routes.public('head', '/v1/email-files/:token', serveSignedFile);

  // Open pixel: always answers the image, even for a forged token (or one that is not even valid
  // percent-encoding), so mail clients show nothing broken.
  routes.public('get', `${openPath}:token`, async (ctx) => {
    await emails.recordOpen(tokenAsSent(ctx), ctx.ip, ctx.header('user-agent'));
    return new RawResponse(pixelGif, { 'content-type': 'image/gif', ...noStore });
  });

  routes.public('get', `${clickPath}:token`, async (ctx) => redirectTo(await emails.recordClick(tokenAsSent(ctx), ctx.ip, ctx.header('user-agent'))));

  // Link scanners and mail gateways probe with HEAD: they get the answer GET would give, and no open or
  // click is recorded (a probe is not the recipient; reads have no side effects).
  routes.public('head', `${openPath}:token`, () => new RawResponse(pixelGif, { 'content-type': 'image/gif', ...noStore }));
  routes.public('head', `${clickPath}:token`, (ctx) => redirectTo(emails.clickTarget(tokenAsSent(ctx))));
}

/** A signed link's token as it stands in the link: base64url, which needs no percent-decoding. */
export function tokenAsSent(ctx: RequestContext<null>): string {
  return ctx.event.context.params?.token ?? '';
}

function redirectTo(target: ClickTarget | undefined): RawResponse {
  // Normalised again: links signed before redirectTarget existed may hold raw non-ASCII or line breaks.
  const url = target === undefined ? undefined : redirectTarget(target.url);
  // A person followed it, from an email: a page, not the API's JSON error.
  if (!url) return recipientPageResponse(invalidLinkPage, 404);
  // Its email is gone: the reader still gets where the link led, seeing where that is first.
  if (!target!.onFile) return recipientPageResponse(linkOfDeletedEmailPage(url));
  return new RawResponse('', { location: url, ...noStore }, 302);
}

function linkOfDeletedEmailPage(url: string): string {
  const shown = escapeHtml(url);
  return recipientPage('Link of an old email', `<h1>This link's email is no longer on file</h1><p>It led to:</p><p><a href="${shown}" rel="noreferrer">${shown}</a></p><p>Follow it only if you trust that address.</p>`);
}

/** A file behind a signed link (an email's attachment or html, a received email's raw message or html): `policy` is its CSP. */
export function signedFileResponse(file: { body: Buffer | string; contentType: string; name?: string } | undefined, policy: string): RawResponse {
  if (!file) throw new AppError('not-found', 'This link is invalid or has expired.');
  const headers: Record<string, string> = {
    'content-type': file.contentType,
    'cache-control': 'private, max-age=300',
    'content-security-policy': policy,
    'x-content-type-options': 'nosniff',
  };
  if (file.name) headers['content-disposition'] = attachmentDisposition(file.name);
  return new RawResponse(file.body, headers);
}

/**
 * RFC 6266: an ASCII `filename` for old clients (anything else replaced by `_`), and the exact name as
 * UTF-8 in `filename*`. A header value may not carry characters past U+00FF or controls at all: writing
 * the raw name failed the whole download for a name such as `名前.pdf`.
 */
export function attachmentDisposition(name: string): string {
  const fallback = name.replace(/[^\x20-\x7e]|["\\%]/g, '_');
  // RFC 5987 attr-chars stay; every other UTF-8 byte is %XX (a lone surrogate becomes U+FFFD's bytes,
  // where encodeURIComponent would throw).
  let encoded = '';
  for (const byte of Buffer.from(name, 'utf8')) {
    const char = String.fromCharCode(byte);
    encoded += /[A-Za-z0-9!#$&+\-.^_`|~]/.test(char) ? char : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return `attachment; filename="${fallback}"; filename*=UTF-8''${encoded}`;
}

/**
 * A send answers `queued` or `scheduled` only (COMPAT.md "Email"): clients test for them. An email to a
 * suppressed address is accepted and recorded as `suppressed` (what GET and search show), and its
 * answer says so in a field of its own.
 */
function compatibleSendAnswer(answer: unknown): unknown {
  const { id, status } = answer as { id: string; status: string };
  return status === 'suppressed' ? { id, status: 'queued', suppressed: true } : answer;
}

/**
 * `Idempotency-Key`: a retry within 24 h gets the first answer (looked up before the body is checked again: a
 * retried scheduled send whose `scheduledAt` has passed meanwhile still gets it); the same key with another
 * body is a 409 conflict. The key is stored in the transaction that accepted the emails; a concurrent duplicate
 * loses on the primary key and then answers the winner's stored result.
 */
async function withIdempotency<T>(ctx: RequestContext, emails: EmailsService, endpoint: string, body: unknown, run: (options: SendOptions) => Promise<T>) {
  const key = ctx.header('idempotency-key');
  if (key === undefined) return run({});
  if (key.length === 0 || key.length > 255) throw new AppError('parameters-invalid', 'Idempotency-Key must have 1 to 255 characters.');
  // The route, not the path as written: `/v1/email/send/` is the same endpoint.
  const hash = (json: string) => createHash('sha256').update(`${endpoint}\n${json}`).digest('base64url');
  // The same fields in another order are the same request. Keys stored before bodies were canonicalised
  // hashed them as sent; that hash still matches for their 24 hours.
  const requestHash = hash(canonicalJson(body));
  const sameRequest = [requestHash, hash(JSON.stringify(body))];
  const stored = await emails.findIdempotentAnswer(ctx.project.id, key, sameRequest);
  if (stored !== undefined) return stored;
  try {
    return await run({ idempotency: { key, requestHash } });
  } catch (error) {
    if ((error as { code?: string }).code !== 'SQLITE_CONSTRAINT_PRIMARYKEY') throw error;
    const winner = await emails.findIdempotentAnswer(ctx.project.id, key, sameRequest);
    if (winner === undefined) throw error;
    return winner;
  }
}

/** JSON with every object's keys sorted (the body's nesting is bounded by the HTTP edge). */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (typeof value !== 'object' || value === null) return JSON.stringify(value) ?? 'null';
  const entries = Object.entries(value).filter(([, v]) => v !== undefined).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

