import { AppError } from '../lib/errors.js';
import type { Routes } from '../http/router.js';
import { parseInput } from '../http/validate.js';
import { createLinkedProjectSchema, deleteProjectSchema, updateProjectSchema } from './schemas.js';
import type { ProjectsService } from './service.js';

/** `/v1/project` acts on the project that owns the key (COMPAT.md "Projects"). */
export function registerProjectRoutes(routes: Routes, projects: ProjectsService): void {
  routes.get('/v1/project', ({ project }) => projects.getProject(project.id));

  routes.patch('/v1/project', async ({ project, json }) => projects.updateProject(project.id, parseInput(updateProjectSchema, await json())));

  routes.post('/v1/project', async ({ project, json }) => projects.createLinkedProject(project.id, parseInput(createLinkedProjectSchema, await json())));

  routes.delete('/v1/project', async ({ project, json, query }) => {
    const body = parseInput(deleteProjectSchema, await json());
    // `?id=a&id=b` arrives as an array: read as "no id", it would delete the caller's own project.
    if (query.id !== undefined && typeof query.id !== 'string') throw new AppError('parameters-invalid', 'id: give one project id.');
    const targetId = body?.id ?? query.id;
    return projects.deleteLinkedProject(project.id, targetId);
  });
}
