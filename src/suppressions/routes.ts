import type { Routes } from '../http/router.js';
import { parseInput } from '../http/validate.js';
import { addSuppressionSchema, listSuppressionsSchema } from './schemas.js';
import type { SuppressionsService } from './service.js';

/** `/v1/suppressions`: list, look up one address, add, remove (extension to the compatible API). */
export function registerSuppressionRoutes(routes: Routes, service: SuppressionsService): void {
  routes.get('/v1/suppressions', (ctx) => service.list(ctx.project.id, parseInput(listSuppressionsSchema, ctx.query, 'query')));
  // As GET /v1/email/{id} answers `{email: null}`: an address not on the list is an answer, not an error.
  routes.get('/v1/suppressions/:emailAddress', (ctx) => service.get(ctx.project.id, ctx.params.emailAddress));
  routes.post('/v1/suppressions', async (ctx) => {
    const result = await service.add(ctx.project.id, parseInput(addSuppressionSchema, await ctx.json(), 'body'));
    if (result.status === 'created') ctx.setStatus(201);
    return result;
  });
  routes.delete('/v1/suppressions/:emailAddress', (ctx) => service.remove(ctx.project.id, ctx.params.emailAddress));
}
