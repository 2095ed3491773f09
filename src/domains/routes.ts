import type { Routes } from '../http/router.js';
import { parseInput } from '../http/validate.js';
import { createDomainSchema } from './schemas.js';
import type { DomainsService } from './service.js';

/** Sending domains (§4.8) plus the extensions `GET /v1/domains/:id` and `POST /v1/domains/:id/verify`. */
export function registerDomainRoutes(routes: Routes, domains: DomainsService): void {
  routes.get('/v1/domains', ({ project }) => {
    const data = domains.list(project.id);
    // COMPAT.md "Domains": the spec answers `data`; some clients read `domains`.
    return { data, domains: data };
  });

  routes.post('/v1/domains', async ({ project, json }) => {
    const body = parseInput(createDomainSchema, await json());
    return domains.create(project.id, (body.domain ?? body.name)!);
  });

  routes.get('/v1/domains/:id', ({ project, params }) => domains.get(project.id, params.id));

  routes.delete('/v1/domains/:id', ({ project, params }) => domains.delete(project.id, params.id));

  routes.post('/v1/domains/:id/verify', ({ project, params }) => domains.verify(project.id, params.id));
}
