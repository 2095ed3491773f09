import type { Routes } from '../http/router.js';
import { parseInput } from '../http/validate.js';
import { addSuppressionSchema, listSuppressionsSchema } from './schemas.js';
import type { SuppressionsService } from './service.js';

/** `/v1/suppressions`: list, add, remove (extension to the compatible API). */
export function registerSuppressionRoutes(routes: Routes, service: SuppressionsService): void {
  routes.get('/v1/suppressions', (ctx) => service.list(ctx.project.id, parseInput(listSuppressionsSchema, ctx.query, 'query')));
  routes.post('/v1/suppressions', async (ctx) => {
    const result = await service.add(ctx.project.id, parseInput(addSuppressionSchema, await ctx.json(), 'body'));
    if (result.status === 'created') ctx.setStatus(201);
    return result;
  });
  routes.delete('/v1/suppressions/:emailAddress', (ctx) => service.remove(ctx.project.id, ctx.params.emailAddress));
}
