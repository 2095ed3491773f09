import type { Db } from '../db/client.js';
import type { Writes } from '../db/write-queue.js';
import type { Clock } from '../lib/clock.js';
import { AppError } from '../lib/errors.js';
import { isId, newId } from '../lib/ids.js';
import type { Logger } from '../lib/logger.js';
import { refuseWhileProjectDeleting } from '../projects/deletion-guard.js';
import { normalizeContent, renderTemplate, type ContentNode, type ProjectDesign } from '../render/index.js';
import { fonts } from './fonts.js';
import { galleryTemplates } from './gallery.js';
import type { TemplatePatch, TemplateRow, TemplatesRepo, TemplateSummaryRow } from './repo.js';
import type { CreateTemplateInput, ListTemplatesQuery, PreviewUnsavedInput, UpdateTemplateInput } from './schemas.js';

/** Templates returned by this interface are content format 2 (spec §9.2); it is not stored. */
export const templateVersion = 2;

export interface TemplatesServiceDeps {
  repo: TemplatesRepo;
  /** The connection the repo and the writes use: a write reads the project's deletion mark on it. */
  db: Db;
  writes: Writes;
  clock: Clock;
  log: Logger;
  /** The caller's project row: its design for previews, its parent for shared templates. */
  findProject(id: string): { parentId: string | null; emailTemplateDesign: unknown } | undefined;
}

export interface TemplateRef {
  id?: string;
  name?: string;
}

/** The template as the API shows it (spec §2.1); `content` only when the row carries it. */
export function presentTemplate(row: TemplateSummaryRow) {
  return {
    id: row.id,
    name: row.name,
    subject: row.subject,
    ...(row.content !== undefined ? { content: row.content } : {}),
    emailText: row.emailText,
    preheader: row.preheader,
    sampleProps: row.sampleProps,
    layoutId: row.layoutId,
    version: templateVersion,
    createdAt: new Date(row.createdAt).toISOString(),
    updatedAt: new Date(row.updatedAt).toISOString(),
  };
}

export function createTemplatesService(deps: TemplatesServiceDeps) {
  const { repo, writes, clock, log } = deps;

  function list(projectId: string, query: ListTemplatesQuery) {
    // One row more than the page tells whether another page exists without a COUNT.
    const rows = repo.listPage(projectId, { before: query.paginationCursorNext, limit: query.limit + 1, includeContent: query.includeContent });
    const hasMore = rows.length > query.limit;
    const page = hasMore ? rows.slice(0, query.limit) : rows;
    return {
      data: page.map(presentTemplate),
      hasMore,
      // Null only on an empty page, as for contacts (contacts/service.ts).
      paginationCursorNext: page.at(-1)?.id ?? null,
    };
  }

  /**
   * A linked project reads its parent's templates by id (COMPAT.md "Projects": it may use them by id
   * only), so retrieve and preview resolve them too; list, update and delete see only the own project.
   */
  function findReadable(projectId: string, id: string): TemplateRow | undefined {
    if (!isId(id)) return undefined;
    const own = repo.findById(projectId, id);
    if (own) return own;
    const parentId = deps.findProject(projectId)?.parentId;
    return parentId ? repo.findById(parentId, id) : undefined;
  }

  function requireReadable(projectId: string, id: string): TemplateRow {
    const row = findReadable(projectId, id);
    // Another project's id answers exactly like a missing one: no existence oracle across projects.
    if (!row) throw new AppError('not-found', `Template ${id} not found.`);
    return row;
  }

  function retrieve(projectId: string, id: string) {
    return { data: presentTemplate(requireReadable(projectId, id)) };
  }

  async function create(projectId: string, input: CreateTemplateInput) {
    const content = normalizeTemplateContent(input.content ?? []);
    const row = await writes.run(() => {
      refuseWhileProjectDeleting(deps.db, projectId);
      assertNameFree(projectId, input.name);
      const now = clock.nowMs();
      const id = newId(clock);
      repo.insert({
        id,
        projectId,
        name: input.name,
        subject: input.subject,
        content,
        emailText: input.emailText ?? null,
        preheader: input.preheader ?? null,
        sampleProps: input.sampleProps ?? null,
        layoutId: input.layoutId ?? null,
        createdAt: now,
        updatedAt: now,
      });
      return repo.findById(projectId, id)!;
    });
    log.info('template created', { projectId, templateId: row.id });
    return { data: presentTemplate(row) };
  }

  async function update(projectId: string, id: string, input: UpdateTemplateInput) {
    const patch: TemplatePatch = {};
    if (input.name !== undefined) patch.name = input.name;
    if (input.subject !== undefined) patch.subject = input.subject;
    if (input.content !== undefined) patch.content = normalizeTemplateContent(input.content);
    if (input.emailText !== undefined) patch.emailText = input.emailText;
    if (input.preheader !== undefined) patch.preheader = input.preheader;
    if (input.sampleProps !== undefined) patch.sampleProps = input.sampleProps;
    if (input.layoutId !== undefined) patch.layoutId = input.layoutId;
    const row = await writes.run(() => {
      refuseWhileProjectDeleting(deps.db, projectId);
      const current = isId(id) ? repo.findById(projectId, id) : undefined;
      if (!current) throw new AppError('not-found', `Template ${id} not found.`);
      if (patch.name !== undefined && patch.name !== current.name) assertNameFree(projectId, patch.name);
      repo.update(projectId, id, { ...patch, updatedAt: clock.nowMs() });
      return repo.findById(projectId, id)!;
    });
    log.info('template updated', { projectId, templateId: id, fields: Object.keys(patch) });
    return { data: presentTemplate(row) };
  }

  async function remove(projectId: string, id: string) {
    // Like deleting an email: an unknown id is `{deleted: false}`, not an error (COMPAT.md "Transport").
    const deleted = isId(id) && (await writes.run(() => repo.delete(projectId, id))) > 0;
    if (deleted) log.info('template deleted', { projectId, templateId: id });
    return { deleted };
  }

  function assertNameFree(projectId: string, name: string): void {
    if (repo.findByName(projectId, name)) {
      throw new AppError('resource-duplicate', `A template named "${name}" already exists in this project.`);
    }
  }

  /**
   * The template a send uses: the own project's by id or by name (case and whitespace sensitive, spec
   * §4.1), or the parent project's by id only (COMPAT.md "Projects").
   */
  function findForSend(projectId: string, ref: TemplateRef): TemplateRow {
    const row = ref.id !== undefined ? findReadable(projectId, ref.id) : ref.name !== undefined ? repo.findByName(projectId, ref.name) : undefined;
    if (!row) {
      const what = ref.id !== undefined ? `id "${ref.id}"` : `name "${ref.name ?? ''}"`;
      throw new AppError('template-not-found', `No template with ${what} exists in this project.`);
    }
    return row;
  }

  function designOf(projectId: string): ProjectDesign {
    return (deps.findProject(projectId)?.emailTemplateDesign ?? {}) as ProjectDesign;
  }

  /** Preview of a saved template; without templateProps it shows the template's sampleProps. */
  function previewSaved(projectId: string, id: string, templateProps: Record<string, unknown> | null | undefined) {
    const row = requireReadable(projectId, id);
    return renderPreview(projectId, {
      subject: row.subject,
      content: row.content as ContentNode[],
      preheader: row.preheader,
      emailText: row.emailText,
      layoutId: row.layoutId,
      props: templateProps ?? row.sampleProps ?? {},
    });
  }

  /** Preview of a template that is not saved (an editor draft, a gallery template). */
  function previewUnsaved(projectId: string, input: PreviewUnsavedInput) {
    return renderPreview(projectId, {
      subject: input.subject,
      content: normalizeTemplateContent(input.content ?? []),
      preheader: input.preheader ?? null,
      emailText: input.emailText ?? null,
      layoutId: input.layoutId ?? null,
      props: input.templateProps ?? input.sampleProps ?? {},
    });
  }

  function renderPreview(
    projectId: string,
    t: { subject: string; content: ContentNode[]; preheader: string | null; emailText: string | null; layoutId: string | null; props: Record<string, unknown> },
  ) {
    // data-uri images so the HTML displays standalone (a browser cannot resolve cid: references).
    const rendered = renderTemplate(
      { subject: t.subject, content: t.content, preheader: t.preheader, emailText: t.emailText, layoutId: t.layoutId },
      t.props,
      designOf(projectId),
      { imageMode: 'data-uri' },
    );
    return { subject: rendered.subject, html: rendered.html, text: rendered.text };
  }

  return {
    list,
    retrieve,
    create,
    update,
    remove,
    findForSend,
    previewSaved,
    previewUnsaved,
    gallery: () => ({ data: galleryTemplates }),
    fonts: () => ({ data: fonts }),
  };
}

export type TemplatesService = ReturnType<typeof createTemplatesService>;

/** Validates content nodes and assigns missing or duplicate ids; errors name the path (`content[3].url`). */
function normalizeTemplateContent(content: unknown[]): ContentNode[] {
  return normalizeContent(content);
}
