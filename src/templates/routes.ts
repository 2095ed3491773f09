import type { Routes } from '../http/router.js';
import { parseInput } from '../http/validate.js';
import { createTemplateSchema, listTemplatesQuerySchema, previewSavedSchema, previewUnsavedSchema, updateTemplateSchema } from './schemas.js';
import type { TemplatesService } from './service.js';

/** Spec §4.6 templates, plus delete and the preview endpoints (issue 3). */
export function registerTemplateRoutes(routes: Routes, templates: TemplatesService): void {
  // Static paths first so `gallery`, `fonts` and `preview` are never taken for a template id.
  routes.get('/v1/templates/gallery', () => templates.gallery());
  routes.get('/v1/templates/fonts', () => templates.fonts());
  routes.post('/v1/templates/preview', async ({ project, json }) => templates.previewUnsaved(project.id, parseInput(previewUnsavedSchema, await json())));

  routes.get('/v1/templates', ({ project, query }) => templates.list(project.id, parseInput(listTemplatesQuerySchema, query, 'query')));
  routes.post('/v1/templates', async ({ project, json }) => templates.create(project.id, parseInput(createTemplateSchema, await json())));

  routes.get('/v1/templates/:id', ({ project, params }) => templates.retrieve(project.id, params.id));
  routes.patch('/v1/templates/:id', async ({ project, params, json }) =>
    templates.update(project.id, params.id, parseInput(updateTemplateSchema, await json())),
  );
  routes.delete('/v1/templates/:id', ({ project, params }) => templates.remove(project.id, params.id));
  routes.post('/v1/templates/:id/preview', async ({ project, params, json }) =>
    templates.previewSaved(project.id, params.id, parseInput(previewSavedSchema, await json())?.templateProps),
  );
}
