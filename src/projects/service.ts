import type { Sqlite } from '../db/client.js';
import { writeTransaction } from '../db/client.js';
import { createReadCache } from '../db/read-cache.js';
import type { WritesWithProcedures } from '../db/write-queue.js';
import type { Clock } from '../lib/clock.js';
import { AppError, StartupError, deletedMeanwhile, notFound } from '../lib/errors.js';
import { newId } from '../lib/ids.js';
import type { Logger } from '../lib/logger.js';
import type { AuthenticatedProject } from './keys.js';
import { generateApiKey, hashApiKey, hashesEqual, keyPrefix } from './keys.js';
import type { ProjectRow, ProjectsRepo } from './repo.js';
import type { CreateLinkedProjectInput, UpdateProjectInput } from './schemas.js';

export interface ProjectsServiceDeps {
  repo: ProjectsRepo;
  sqlite: Sqlite;
  /** The API's writes join the group commit; start-up and the CLI's key commands write directly. */
  writes: WritesWithProcedures;
  clock: Clock;
  log: Logger;
}

/** The project as the API shows it. */
export function presentProject(row: ProjectRow) {
  return {
    id: row.id,
    name: row.name,
    parentProjectId: row.parentId,
    isDefault: row.isDefault,
    emailTemplateDesign: row.emailTemplateDesign ?? {},
    createdAt: new Date(row.createdAt).toISOString(),
    updatedAt: new Date(row.updatedAt).toISOString(),
  };
}

/** Rows of a deleted project removed per write. */
const projectPurgeBatch = 500;
/** Bytes of emails (bodies, attachments, captured messages) one write of a purge deletes at most (projects/purge.ts). */
const projectPurgeBatchBytes = 8 * 1024 * 1024;

/**
 * Linked projects one project may have at once (a CI job's each, a tenant's each): far past real use.
 * Each has keys, rows and a purge to run; with the depth below, it bounds one call's reach, not a
 * whole tree's (each linked project gets a key of its own; the storage reserve bounds that).
 */
export const maxLinkedProjectsPerProject = 1000;

/** Levels of linked projects below a top-level one: a tenant may link its own, not without end. */
export const maxLinkedDepth = 8;

export function createProjectsService(deps: ProjectsServiceDeps) {
  const { repo, sqlite, writes, clock, log } = deps;
  // API keys that authenticated recently: a request skips hashing the key and looking it up. A revoked
  // key stops working at once: the cache forgets on every change to keys or projects (db/read-cache.ts).
  // Only successes are kept.
  const authCache = createReadCache<AuthenticatedProject>(sqlite);

  /** Spec §5: no header → required; not `Bearer <token>` → invalid; unknown or revoked → failed. */
  function authenticate(authorization: string | undefined): AuthenticatedProject {
    if (authorization === undefined || authorization.trim() === '') {
      throw new AppError('authentication-required', 'Missing Authorization header. Send "Authorization: Bearer <API key>".');
    }
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (!match) {
      throw new AppError('authentication-invalid', 'The Authorization header must be "Bearer <API key>".');
    }
    const project = authCache.get(match[1], () => findActiveProject(match[1]));
    if (!project) throw new AppError('authentication-failed', 'The API key is not valid or has been revoked.');
    return project;
  }

  function findActiveProject(key: string): AuthenticatedProject | undefined {
    const hash = hashApiKey(key);
    const found = repo.findActiveKeyByHash(hash);
    return found && hashesEqual(found.keyHash, hash) ? found.project : undefined;
  }

  function createProjectWithKey(name: string, parentId: string | null, isDefault: boolean, key = generateApiKey()) {
    const now = clock.nowMs();
    const projectId = newId(clock);
    repo.insert({ id: projectId, parentId, name, isDefault, emailTemplateDesign: null, createdAt: now, updatedAt: now });
    repo.insertKey({ id: newId(clock), projectId, name: 'default', keyHash: hashApiKey(key), keyPrefix: keyPrefix(key), createdAt: now });
    return { projectId, key };
  }

  /**
   * First start: create the default project and its key. With `auth.api_key` configured that value is
   * the key (so CI can fix it); otherwise one is generated and returned once for printing.
   */
  function ensureDefaultProject(configuredKey: string): { projectId: string; generatedKey?: string } {
    return writeTransaction(sqlite, () => {
      const existing = repo.findDefault();
      if (!existing) {
        const { projectId, key } = createProjectWithKey('Default project', null, true, configuredKey || undefined);
        if (configuredKey) repo.setConfiguredKeyHash(hashApiKey(configuredKey));
        else repo.setUnshownKeyHash(hashApiKey(key));
        log.info('default project created', { projectId });
        return { projectId, generatedKey: configuredKey ? undefined : key };
      }
      const lostKeyRevoked = revokeUnshownKey();
      if (configuredKey) {
        applyConfiguredKey(existing.id, configuredKey);
        return { projectId: existing.id };
      }
      let generatedKey = retireRemovedConfiguredKey(existing.id);
      if (!generatedKey && lostKeyRevoked && !hasActiveKey(existing.id)) generatedKey = generateDefaultKey(existing.id);
      // Every key revoked with the CLI: left so (it may be on purpose), but nothing can use the API.
      if (!hasActiveKey(existing.id)) {
        log.warn('the default project has no active API key: no client can use it; create one with `npm run postino -- keys create`', { projectId: existing.id });
      }
      return { projectId: existing.id, generatedKey };
    });
  }

  /**
   * `auth.api_key` at a start after the first: the key works, and it replaces the key the config created
   * before. It is the config's own key (revoked when the config changes) only when the config created it:
   * now, at an earlier start (the same value), or at the start it was restored by. A key made with the CLI
   * or the API that the operator also put in the config stays theirs (an operator copying the key printed
   * on the first start into config.toml does just that).
   */
  function applyConfiguredKey(projectId: string, key: string): void {
    const hash = hashApiKey(key);
    const restored = restoreRemovedConfiguredKey(hash);
    const created = ensureKey(projectId, key, 'configured');
    retirePreviousConfiguredKey(hash, created || restored);
  }

  /**
   * `auth.api_key` removed from the config: the key it set stops working, as when it is changed (the
   * README's CI sandbox key must not stay valid on a data directory later used for real). When that
   * leaves the default project without a key, a new one is generated and printed, as on a first start.
   */
  function retireRemovedConfiguredKey(projectId: string): string | undefined {
    const previous = repo.configuredKeyHash();
    if (!previous) return undefined;
    // Only a key this removal revoked may come back: one revoked with the CLI before stays revoked.
    if (repo.revokeKeyByHash(previous, clock.nowMs()) > 0) repo.setRemovedConfiguredKeyHash(previous);
    repo.clearConfiguredKeyHash();
    log.warn('auth.api_key removed from the configuration: the key it set is revoked (configuring the same key again restores it)');
    if (hasActiveKey(projectId)) return undefined;
    return generateDefaultKey(projectId);
  }

  const hasActiveKey = (projectId: string) => repo.listKeys(projectId).some((key) => key.revokedAt === null);

  /** A key for the default project that this start prints; unshown until main says it printed it. */
  function generateDefaultKey(projectId: string): string {
    const key = generateApiKey();
    repo.insertKey({ id: newId(clock), projectId, name: 'default', keyHash: hashApiKey(key), keyPrefix: keyPrefix(key), createdAt: clock.nowMs() });
    repo.setUnshownKeyHash(hashApiKey(key));
    return key;
  }

  /**
   * A generated key is committed during the boot and printed after it (main.ts). A start killed in
   * between (kill -9, a crash, a power loss, the OOM killer) left a key no one had ever seen, and every
   * later start printed nothing, the project having an active key: the operator had no key and no word
   * of why. Such a key is revoked (a key nobody has must not stay valid), and the start then prints a new
   * one when none is left. Answers whether it revoked one.
   */
  function revokeUnshownKey(): boolean {
    const hash = repo.unshownKeyHash();
    if (!hash) return false;
    repo.setUnshownKeyHash(undefined);
    if (repo.revokeKeyByHash(hash, clock.nowMs()) === 0) return false;
    log.warn('the API key generated at the previous start was never printed (that start was killed first): it is revoked');
    return true;
  }

  /** main.ts printed the generated key: from now on it is the operator's, kept at the next start. */
  function generatedKeyShown(): Promise<unknown> {
    return writes.run(() => repo.setUnshownKeyHash(undefined));
  }

  /**
   * The key revoked because `auth.api_key` was removed works again once the same key is configured
   * again: a start that missed its configuration once (an environment file not loaded) must not lock
   * every client out for good. Any other configured key ends that chance; keys revoked with the CLI or
   * replaced by a changed `auth.api_key` stay revoked. Answers whether it restored the key.
   */
  function restoreRemovedConfiguredKey(configuredHash: string): boolean {
    const removed = repo.removedConfiguredKeyHash();
    if (!removed) return false;
    repo.setRemovedConfiguredKeyHash(undefined);
    if (removed !== configuredHash || repo.restoreKeyByHash(removed) === 0) return false;
    log.warn('auth.api_key is configured again: the key it set, revoked when it was removed, works again');
    return true;
  }

  /**
   * Makes sure `key` authenticates `projectId`; a configured key that belongs elsewhere is an error.
   * Answers whether it created the key (it was not stored before).
   */
  function ensureKey(projectId: string, key: string, name: string): boolean {
    const hash = hashApiKey(key);
    const row = repo.findKeyByHash(hash);
    if (row && row.projectId !== projectId) throw new StartupError('auth.api_key is already the key of another project; configure another key');
    if (row?.revokedAt) {
      throw new StartupError(
        `auth.api_key was revoked on ${new Date(row.revokedAt).toISOString().slice(0, 10)} (with \`keys revoke\`, or when auth.api_key was changed to another key: a rotated-out key stays revoked); configure the current key or another one (\`npm run postino -- keys create\`), or give a sandbox a fresh storage.data_dir`,
      );
    }
    if (!row) {
      repo.insertKey({ id: newId(clock), projectId, name, keyHash: hash, keyPrefix: keyPrefix(key), createdAt: clock.nowMs() });
      return true;
    }
    // Builds before the quarter rule (keys.ts keyPrefix) stored 10 characters of any key: most or all of a
    // short configured key, in the clear, kept in the file by an in-place upgrade. This start knows the key.
    if (row.keyPrefix !== keyPrefix(key)) repo.setKeyPrefix(row.id, keyPrefix(key));
    return false;
  }

  /**
   * A changed `auth.api_key` replaces the key it created before: an operator rotating the key expects the
   * old one to stop working. Only a key the config created is remembered as its own (`createdByConfig`),
   * so only such a key is revoked when the value changes or is removed: keys created with the CLI or the
   * API are not touched, also while the config names one of them (every client given it would lose it).
   */
  function retirePreviousConfiguredKey(currentHash: string, createdByConfig: boolean): void {
    const previous = repo.configuredKeyHash();
    if (previous === currentHash) return;
    if (previous && repo.revokeKeyByHash(previous, clock.nowMs()) > 0) {
      log.warn('auth.api_key changed: the key configured before is revoked');
    }
    if (createdByConfig) repo.setConfiguredKeyHash(currentHash);
    else repo.clearConfiguredKeyHash();
  }

  function requireProject(id: string): ProjectRow {
    const row = repo.findById(id);
    if (!row) throw notFound('Project');
    return row;
  }

  /**
   * A write of a project whose deletion is under way, by a request authenticated just before it began,
   * is refused as a send is (projects/deletion-guard.ts); called inside the write's transaction.
   */
  function refuseWhileDeleting(projectId: string): void {
    if (repo.isDeleting(projectId)) throw deletedMeanwhile();
  }

  function getProject(projectId: string) {
    return presentProject(requireProject(projectId));
  }

  function updateProject(projectId: string, input: UpdateProjectInput) {
    return writes.run(() => {
      const row = requireProject(projectId);
      refuseWhileDeleting(projectId);
      const design =
        input.emailTemplateDesign === undefined
          ? row.emailTemplateDesign
          : input.emailTemplateDesign === null
            ? null
            : mergeDesign(row.emailTemplateDesign ?? {}, input.emailTemplateDesign);
      repo.update(projectId, { name: input.name ?? row.name, emailTemplateDesign: design, updatedAt: clock.nowMs() });
      return presentProject(requireProject(projectId));
    });
  }

  function createLinkedProject(parentId: string, input: CreateLinkedProjectInput) {
    return writes.run(() => {
      requireProject(parentId);
      // A request authenticated just before its project's deletion began: the new project would be
      // answered with a working key, then taken by the deletion's final cascade. (Writes are serialised:
      // one that committed before the mark is counted by the deletion's own check of linked projects.)
      refuseWhileDeleting(parentId);
      if (depthOf(parentId) >= maxLinkedDepth) {
        throw new AppError('conflict', `Linked projects go at most ${maxLinkedDepth} levels below a top-level project; this one is at the last level.`);
      }
      const children = repo.countChildren(parentId);
      if (children >= maxLinkedProjectsPerProject) {
        throw new AppError('conflict', `A project has at most ${maxLinkedProjectsPerProject} linked projects; it has ${children}. Delete some first.`);
      }
      const { projectId, key } = createProjectWithKey(input.name, parentId, false);
      log.info('linked project created', { projectId, parentId });
      const created = { ...presentProject(requireProject(projectId)), apiKey: key };
      return { ...created, created };
    });
  }

  /** Levels above the project: 0 for a top-level one. */
  function depthOf(projectId: string): number {
    let depth = 0;
    for (let parentId = repo.findById(projectId)?.parentId; parentId && depth <= maxLinkedDepth; depth++) parentId = repo.findById(parentId)?.parentId;
    return depth;
  }

  /** Whether `ancestorId` is above `project` in the tree of linked projects (its parent, or its parent's, ...). */
  function isAncestor(ancestorId: string, project: ProjectRow): boolean {
    let parentId = project.parentId;
    for (let depth = 0; parentId && depth < maxLinkedDepth; depth++) {
      if (parentId === ancestorId) return true;
      parentId = repo.findById(parentId)?.parentId ?? null;
    }
    return false;
  }

  /**
   * Deletes a linked project: the key's own project when it is linked, or one below it named by `id` (a
   * child, or a child's: a tenant that made a linked project of its own stays deletable by its parent).
   * The default project and projects with children of their own are kept. Its keys stop working at
   * once; its rows then go in batches on the writer thread (projects/purge.ts), the project row last.
   * Interrupted (a crash), the deletion goes on at the next start (resumeDeletions). A delete that finds
   * another under way (its own key and its parent's at once) answers {deleted: false}: the other deletes it.
   */
  async function deleteLinkedProject(callerId: string, targetId?: string) {
    const target = await writes.run(() => {
      const target = repo.findById(targetId ?? callerId);
      const allowed = target && (target.id === callerId || isAncestor(callerId, target));
      // Like every DELETE of an id the key cannot see (docs/errors.md): the spec's {deleted: boolean}.
      if (!target || !allowed || repo.isDeleting(target.id)) return undefined;
      if (!target.parentId) throw new AppError('conflict', 'Only linked projects can be deleted; this is a top-level project.');
      // The foreign key cascades: deleting a project with linked projects would silently take theirs too.
      const children = repo.countChildren(target.id);
      if (children > 0) {
        // Named: a parent deleting a tenant that made its own has no other way to learn their ids.
        const named = repo.childIds(target.id, 20);
        throw new AppError('conflict', `This project has ${children} linked project(s) of its own; delete them first (DELETE /v1/project with {"id": ...}): ${named.join(', ')}${children > named.length ? ', ...' : ''}.`);
      }
      repo.revokeProjectKeys(target.id, clock.nowMs());
      // Marked in the same transaction: a crash during the purge leaves the mark, and the next start
      // finishes the deletion (resumeDeletions) instead of leaving a project nobody can reach.
      repo.markDeleting(target.id, clock.nowMs());
      return target;
    });
    if (!target) return { deleted: false };
    await purgeProject(target.id);
    return { deleted: true };
  }

  /** Deletes a marked project's rows a batch per write, then the project row and its mark. */
  async function purgeProject(projectId: string): Promise<void> {
    let purged: number;
    do purged = await writes.call('projects.purge-rows', { projectId, limit: projectPurgeBatch, maxBytes: projectPurgeBatchBytes });
    while (purged > 0);
    await writes.run(() => {
      repo.delete(projectId);
      repo.unmarkDeleting(projectId);
    });
    log.info('linked project deleted', { projectId });
  }

  /** At start: deletions a crash interrupted go on in the background. */
  function resumeDeletions(): Promise<void> {
    const pending = repo.listDeleting();
    if (pending.length > 0) log.info('resuming interrupted project deletions', { projectIds: pending });
    return pending.reduce<Promise<void>>(
      (previous, projectId) => previous.then(() => purgeProject(projectId)).catch((error) => log.warn('project deletion interrupted; it goes on at the next start', { projectId, error: (error as Error).message })),
      Promise.resolve(),
    );
  }

  function createKey(projectId: string, name: string) {
    requireProject(projectId);
    // Its row stays until the purge ends (an interrupted one goes on at the next start); a key made now
    // would work on a project whose keys were all revoked so that it stops working at once.
    if (repo.isDeleting(projectId)) throw new AppError('conflict', `project ${projectId} is being deleted; it cannot have a new key.`);
    const key = generateApiKey();
    const id = newId(clock);
    repo.insertKey({ id, projectId, name, keyHash: hashApiKey(key), keyPrefix: keyPrefix(key), createdAt: clock.nowMs() });
    return { id, projectId, name, key };
  }

  return {
    authenticate,
    ensureDefaultProject,
    generatedKeyShown,
    getProject,
    updateProject,
    createLinkedProject,
    deleteLinkedProject,
    resumeDeletions,
    createKey,
    listKeys: (projectId?: string) => repo.listKeys(projectId),
    revokeKey: (id: string) => writeTransaction(sqlite, () => repo.revokeKey(id, clock.nowMs())) > 0,
    listProjects: () => repo.listAll().map(presentProject),
    /** Whether a linked project's deletion is under way (interrupted by a stop, it goes on at the next start). */
    isBeingDeleted: (projectId: string) => repo.isDeleting(projectId),
    /** The project row (internal use: design for rendering, parent for template sharing). */
    findProject: (id: string) => repo.findById(id),
  };
}

export type ProjectsService = ReturnType<typeof createProjectsService>;

function mergeDesign(current: Record<string, unknown>, patch: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...current };
  for (const [key, value] of Object.entries(patch)) {
    if (value === undefined) continue;
    // One level down too: a client uploading a new logo file must not lose the logo's link and width.
    // null still clears a whole group (logo, colors, font) or a single field.
    const before = out[key];
    out[key] = isPlainObject(before) && isPlainObject(value) ? mergeDesign(before, value) : value;
  }
  return out;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
