import type { Sqlite } from '../db/client.js';
import { cachedStatement } from '../db/statement-cache.js';
import { readFtsWatermark } from './fts-indexer.js';
import { AppError } from '../lib/errors.js';
import { isId } from '../lib/ids.js';
import type { StoredEmailRow } from './repo.js';
import { isoInstant } from '../lib/iso-date.js';
import type { SearchEmailsInput } from './schemas.js';

type Query = NonNullable<SearchEmailsInput['query']>;

// Listing never loads bodies: `html`/`text` only say whether they exist (up to 1 MB each otherwise); an
// empty text is none, as present.ts has it (octet_length reads the record header, not the text).
const columns = `id, project_id, status, to_address, from_address, from_name, reply_to_address, reply_to_name, subject,
  template_id, template_name, template_props, automation_id, messenger_id, content_kind,
  case when html is null then null else '' end as html, case when octet_length(text) > 0 then 'x' end as text,
  null as headers, is_open_tracked, scheduled_at, created_at, updated_at`;

const exactFields = {
  toAddress: 'to_address',
  fromName: 'from_name',
  fromAddress: 'from_address',
  subject: 'subject',
  templateName: 'template_name',
  templateId: 'template_id',
  automationId: 'automation_id',
  messengerId: 'messenger_id',
} as const;

/**
 * Addresses (ASCII only, spec §4.2) match without case, as the suppression list and the text search
 * compare them: a search for Ann@Example.com finds ann@example.com. to_address has a NOCASE index
 * (migration 0021); from_address is narrowed by the trigram index, which folds case too.
 */
const caseInsensitiveColumns = new Set<string>(['to_address', 'from_address']);

interface Where {
  sql: string[];
  args: any[];
  /** `indexed by …` clause when the planner's own pick is known to be slow (see pickScheduledIndex). */
  index?: string;
  /**
   * Two or more statuses: not a `status in (…)` condition but one branch per status (see `branchesOf`).
   * With `in`, SQLite cannot read (project_id, status, id) newest first for several statuses at once and
   * walks every email of the project instead: 310-380 ms over 1,000,000 for two rare statuses.
   */
  statuses?: string[];
}

/** The conditions of each branch: one per status when there are several, else the query as it is. */
function branchesOf(where: Where): { sql: string[]; args: any[] }[] {
  if (!where.statuses) return [{ sql: where.sql, args: where.args }];
  return where.statuses.map((status) => ({ sql: [...where.sql, 'status = ?'], args: [...where.args, status] }));
}

export interface SearchPage<T> {
  hasPrev: boolean;
  hasMore: boolean;
  paginationCursorPrev: string | null;
  paginationCursorNext: string | null;
  data: T[];
}

/**
 * Spec §4.3: filters, newest first (ids are time-ordered), cursors both ways. One extra row tells whether
 * more exist in the direction of travel; one indexed probe tells whether any exist behind the page.
 */
export function searchEmails<T>(sqlite: Sqlite, projectId: string, input: SearchEmailsInput, present: (row: StoredEmailRow) => T): SearchPage<T> {
  const where = buildWhere(projectId, input.query ?? {});
  narrowByTrigrams(sqlite, input.query ?? {}, where);
  pickScheduledIndex(sqlite, input.query ?? {}, where);
  const next = cursorValue(input.paginationCursorNext, 'paginationCursorNext');
  const prev = next === undefined ? cursorValue(input.paginationCursorPrev, 'paginationCursorPrev') : undefined;
  const backwards = prev !== undefined;
  const page = [...where.sql];
  const args: any[] = [...where.args];
  if (next !== undefined) (page.push('id < ?'), args.push(next));
  if (prev !== undefined) (page.push('id > ?'), args.push(prev));
  // Rows are picked by rowid first and loaded after: the pick can then run on an index alone (a
  // scheduledAt day range sorts its index entries, not 100k table rows) and only the page is read.
  const order = `order by id ${backwards ? 'asc' : 'desc'}`;
  const cursor = page.slice(where.sql.length);
  const cursorArgs = args.slice(where.args.length);
  const branches = branchesOf(where);
  // Several statuses: each branch reads its own (project_id, status, id) range in order, `limit` rows at
  // most, and the union is ordered once.
  const pick =
    branches.length === 1
      ? `select rowid from emails ${where.index ?? ''} where ${page.join(' and ')} ${order} limit ?`
      : `select pick_rowid from (${branches
          .map((b) => `select * from (select rowid as pick_rowid, id from emails ${where.index ?? ''} where ${[...b.sql, ...cursor].join(' and ')} ${order} limit ?)`)
          .join(' union all ')}) ${order} limit ?`;
  const pickArgs = branches.length === 1 ? [...args, input.limit + 1] : [...branches.flatMap((b) => [...b.args, ...cursorArgs, input.limit + 1]), input.limit + 1];
  const rows = prepare(sqlite, `select ${columns} from emails where rowid in (${pick}) ${order}`).all(...pickArgs) as StoredEmailRow[];
  const extra = rows.length > input.limit;
  if (extra) rows.pop();
  if (backwards) rows.reverse();
  if (rows.length === 0) return emptyPage(sqlite, where, next, prev);
  const first = rows[0].id;
  const last = rows[rows.length - 1].id;
  const hasMore = backwards ? exists(sqlite, where, 'id < ?', last) : extra;
  // A first page holds the newest matches, so nothing newer can match: no probe (it would rescan
  // everything the page query skipped, doubling the cost of sparse filters).
  const firstPage = next === undefined && !backwards;
  const hasPrev = backwards ? extra : !firstPage && exists(sqlite, where, 'id > ?', first);
  return { hasPrev, hasMore, paginationCursorPrev: first, paginationCursorNext: last, data: rows.map(present) };
}

/**
 * A page with nothing on it: past the end, or before the newest. The matches on the other side of the
 * cursor are still there, so that direction says so, with a cursor that includes the cursor's own row:
 * the id next to it (ids are 24 hex digits, compared as text).
 */
function emptyPage<T>(sqlite: Sqlite, where: Where, next: string | undefined, prev: string | undefined): SearchPage<T> {
  const hasPrev = next !== undefined && exists(sqlite, where, 'id >= ?', next);
  const hasMore = prev !== undefined && exists(sqlite, where, 'id <= ?', prev);
  return {
    hasPrev,
    hasMore,
    paginationCursorPrev: hasPrev ? adjacentId(next!, -1n) : null,
    paginationCursorNext: hasMore ? adjacentId(prev!, 1n) : null,
    data: [],
  };
}

function adjacentId(id: string, step: bigint): string {
  const value = BigInt(`0x${id}`) + step;
  if (value < 0n || value >= 1n << 96n) return id;
  return value.toString(16).padStart(24, '0');
}

function exists(sqlite: Sqlite, where: Where, condition: string, id: string): boolean {
  const branches = branchesOf(where);
  const probe = (b: { sql: string[] }) => `select 1 from emails ${where.index ?? ''} where ${[...b.sql, condition].join(' and ')}`;
  const sql = branches.length === 1 ? `${probe(branches[0])} limit 1` : `select 1 where ${branches.map((b) => `exists (${probe(b)})`).join(' or ')}`;
  return prepare(sqlite, sql).get(...branches.flatMap((b) => [...b.args, id])) !== undefined;
}

function cursorValue(value: string | null | undefined, field: string): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (!isId(value)) throw new AppError('parameters-invalid', `${field}: must be an email id (24 hex characters).`);
  return value;
}

function buildWhere(projectId: string, query: Query): Where {
  const sql = ['project_id = ?'];
  const args: any[] = [projectId];
  for (const [field, column] of Object.entries(exactFields)) {
    const value = query[field as keyof typeof exactFields];
    if (value !== undefined) (sql.push(`${column} = ?${caseInsensitiveColumns.has(column) ? ' collate nocase' : ''}`), args.push(value));
  }
  if (query.search !== undefined && query.search.trim() !== '') {
    const pattern = `%${query.search.trim().replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    const like = (column: string) => `${column} like ? escape '\\'`;
    sql.push(`(${['to_address', 'from_address', 'from_name', 'subject'].map(like).join(' or ')})`);
    args.push(pattern, pattern, pattern, pattern);
  }
  let statuses: string[] | undefined;
  if (query.status !== undefined) {
    const distinct = [...new Set(Array.isArray(query.status) ? query.status : [query.status])];
    // An empty list (a UI with no status ticked) matches no email, where no condition matched them all.
    if (distinct.length === 0) sql.push('0');
    else if (distinct.length === 1) (sql.push('status = ?'), args.push(distinct[0]));
    else statuses = distinct;
  }
  if (query.scheduledAt !== undefined) addScheduledAt(query.scheduledAt, sql, args);
  for (const [key, value] of Object.entries(query.templateProps ?? {})) {
    const path = `$."${key.replace(/["\\]/g, (c) => `\\${c}`)}"`;
    // Whichever JSON type a prop was sent with, `{n: 5}` finds `{n: "5"}` and `{n: 5}`, `{t: true}` finds
    // `{t: "true"}` and `{t: true}`: a number query compares numbers as numbers (1e21 is "1.0e+21" to
    // SQLite's text, "1e+21" to JavaScript's) and text as the number's text; anything else compares as
    // text, booleans by their JSON type (json_extract reads true as 1).
    if (typeof value === 'number') {
      sql.push(`(json_type(template_props, ?) in ('integer', 'real') and json_extract(template_props, ?) = ? or json_type(template_props, ?) = 'text' and json_extract(template_props, ?) = ?)`);
      args.push(path, path, value, path, path, String(value));
    } else {
      sql.push(`(case json_type(template_props, ?) when 'true' then 'true' when 'false' then 'false' else cast(json_extract(template_props, ?) as text) end) = ?`);
      args.push(path, path, String(value));
    }
  }
  return { sql, args, statuses };
}

/**
 * Text filters (`search`, and exact fromAddress/fromName/subject) match rarely-or-often; a rare one
 * would scan every row of the project. The emails_fts trigram index finds the rows that contain the
 * text (case-folded, so a superset of what the exact conditions accept); when they are few, the query
 * is limited to those rowids and the unchanged conditions decide. When they are many, the newest-first
 * scan finds a page within a few rows anyway, so the query stays as it is. Results are identical
 * either way: the index only ever removes rows the conditions would reject.
 *
 * A set estimated under `candidateLimit` is fetched whole, since a scan would have to walk past many
 * non-matching rows (measured: 5.5k candidates cost ~6 ms, the scan ~25 ms). The estimate comes from a
 * probe of `probeLimit` rows: a common phrase costs its trigrams' doclists up to the last row read
 * (over a million emails, 2,000 candidates of a 1-in-50 address cost 9–13 ms, 250 cost 1.6–1.8 ms).
 */
const probeLimit = 250;
const candidateLimit = 10000;
const trigramFields = { fromAddress: 'from_address', fromName: 'from_name', subject: 'subject' } as const;

function narrowByTrigrams(sqlite: Sqlite, query: Query, where: Where): void {
  const match = trigramMatch(query);
  if (match === undefined) return;
  // Read before the index: rows indexed after this read are still covered by `rowid > watermark`.
  const watermark = readFtsWatermark(sqlite);
  // One row per lookup, the rowids as a JSON array for json_each: ~1 µs per candidate less than a JS
  // object each (5,555 candidates: ~3 ms against ~8 ms).
  const lookup = prepare(
    sqlite,
    'select count(*) as count, max(rowid) as last, json_group_array(rowid) as rowids from (select rowid from emails_fts where emails_fts match ? limit ?)',
  );
  let candidates = lookup.get(match, probeLimit + 1) as Candidates;
  if (candidates.count > probeLimit) {
    if (estimateCandidates(watermark, candidates) > candidateLimit) return;
    candidates = lookup.get(match, candidateLimit + 1) as Candidates;
    if (candidates.count > candidateLimit) return;
  }
  // Rows past the watermark are not indexed yet (fts-indexer.ts): they stay candidates, and the
  // unchanged conditions decide for them as for every other candidate.
  where.sql.push('rowid in (select value from json_each(?) union all select rowid from emails where rowid > ?)');
  where.args.push(candidates.rowids, watermark);
  // At most 10,000 candidates, fetched by rowid and sorted. Left to itself the planner may walk
  // (project_id, id) newest-first to skip the sort, i.e. every email of the project for a rare term
  // (~150 ms over 1M rows), depending on table statistics. NOT INDEXED still allows rowid lookups.
  where.index = 'not indexed';
}

/** The first `count` rowids matching the trigram query, as a JSON array. */
interface Candidates {
  count: number;
  last: number | null;
  rowids: string;
}

/** Candidates come in rowid order: the share of the indexed rows they span extrapolates to a total. */
function estimateCandidates(watermark: number, candidates: Candidates): number {
  const spanned = candidates.last ?? 0;
  if (spanned <= 0 || watermark <= 0) return Infinity;
  return (candidates.count * watermark) / spanned;
}

function trigramMatch(query: Query): string | undefined {
  const parts: string[] = [];
  const search = query.search?.trim();
  if (search !== undefined && hasTrigram(search)) parts.push(`{to_address from_address from_name subject} : ${ftsPhrase(search)}`);
  for (const [field, column] of Object.entries(trigramFields)) {
    const value = query[field as keyof typeof trigramFields];
    if (value !== undefined && hasTrigram(value)) parts.push(`${column} : ${ftsPhrase(value)}`);
  }
  return parts.length > 0 ? parts.join(' AND ') : undefined;
}

/**
 * A text filter the trigram index cannot serve (under 3 characters) leaves the query to walk the
 * project's emails newest first until a page matches: with few matches over a large project, seconds.
 * The search runner keeps such searches on a thread of their own (search-runner.ts).
 */
export function mayScanProject(query: Query): boolean {
  const search = query.search?.trim();
  if (search && !hasTrigram(search)) return true;
  return Object.keys(trigramFields).some((field) => {
    const value = query[field as keyof typeof trigramFields];
    return value !== undefined && !hasTrigram(value);
  });
}

/** The trigram tokenizer matches nothing for text shorter than 3 characters. */
function hasTrigram(text: string): boolean {
  return [...text].length >= 3;
}

function ftsPhrase(text: string): string {
  return `"${text.replace(/"/g, '""')}"`;
}

/**
 * A scheduledAt day range alone: the planner (bound LIMIT, no useful statistics) walks every email
 * newest first reading each row, or sorts the whole range (100k+ index entries for a busy day). A
 * bounded count on the range index tells which is cheap: few matches are sorted from the range
 * index; many are found by walking only scheduled emails, newest first, in an index that holds
 * scheduled_at, stopping after a page. Only the access path changes, never the conditions.
 */
const sortableRange = 2000;

function pickScheduledIndex(sqlite: Sqlite, query: Query, where: Where): void {
  const value = query.scheduledAt;
  if (value === undefined || !isDay(value) || where.sql.length !== 2 || where.statuses) return;
  const [projectId, from, to] = where.args;
  const probe = prepare(
    sqlite,
    'select count(*) as n from (select 1 from emails indexed by emails_project_scheduled_at_id_idx where project_id = ? and scheduled_at >= ? and scheduled_at < ? limit ?)',
  );
  const { n } = probe.get(projectId, from, to, sortableRange) as { n: number };
  where.index = n < sortableRange ? 'indexed by emails_project_scheduled_at_id_idx' : 'indexed by emails_project_id_scheduled_at_idx';
}

function isDay(value: string): boolean {
  return /^\d{4}-\d{2}-\d{2}$/.test(value);
}

/** A date alone matches that whole UTC day; a date-time matches the exact instant (UTC without an offset). */
function addScheduledAt(value: string, sql: string[], args: any[]): void {
  const at = isoInstant(value);
  if (isDay(value)) {
    sql.push('scheduled_at >= ? and scheduled_at < ?');
    args.push(at, at + 86_400_000);
  } else {
    sql.push('scheduled_at = ?');
    args.push(at);
  }
}

// Few distinct filter shapes exist: their statements are cached per connection, not re-prepared per request.
function prepare(sqlite: Sqlite, sql: string): Statement {
  return cachedStatement(sqlite, sql) as unknown as Statement;
}

interface Statement {
  all(...args: any[]): unknown[];
  get(...args: any[]): unknown;
}
