import type { Routes } from '../http/router.js';
import { parseInput } from '../http/validate.js';
import { createWebhookSchema, listDeliveriesQuery, updateWebhookSchema } from './schemas.js';
import type { WebhooksService } from './service.js';

/** `/v1/webhooks` (extension; the spec does not show webhook management). */
export function registerWebhookRoutes(routes: Routes, webhooks: WebhooksService): void {
  routes.get('/v1/webhooks', ({ project }) => webhooks.list(project.id));

  routes.post('/v1/webhooks', async ({ project, json, setStatus }) => {
    const created = await webhooks.create(project.id, parseInput(createWebhookSchema, await json()));
    setStatus(201);
    return created;
  });

  routes.get('/v1/webhooks/deliveries/:deliveryId', ({ project, params }) => webhooks.getDelivery(project.id, params.deliveryId));

  routes.post('/v1/webhooks/deliveries/:deliveryId/replay', async ({ project, params, setStatus }) => {
    const replay = await webhooks.replay(project.id, params.deliveryId);
    setStatus(202);
    return replay;
  });

  routes.get('/v1/webhooks/:id', ({ project, params }) => webhooks.get(project.id, params.id));

  routes.patch('/v1/webhooks/:id', async ({ project, params, json }) => webhooks.update(project.id, params.id, parseInput(updateWebhookSchema, await json())));

  routes.put('/v1/webhooks/:id', async ({ project, params, json }) => webhooks.update(project.id, params.id, parseInput(updateWebhookSchema, await json())));

  routes.delete('/v1/webhooks/:id', ({ project, params }) => webhooks.delete(project.id, params.id));

  routes.get('/v1/webhooks/:id/deliveries', ({ project, params, query }) => {
    const q = parseInput(listDeliveriesQuery, query, 'query');
    return webhooks.listDeliveries(project.id, params.id, { limit: q.limit, before: q.paginationCursorNext });
  });
}
