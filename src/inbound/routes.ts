import { signedFileResponse } from '../emails/routes.js';
import type { RequestContext, Routes } from '../http/router.js';
import { parseInput } from '../http/validate.js';
import { createRouteSchema, listReceivedSchema, updateRouteSchema } from './schemas.js';
import { inboundFilesPath, type InboundService } from './service.js';

/**
 * A received html is someone else's: shown in a sandbox without scripts, and without remote images
 * either (a sender's tracking pixels would learn the preview was opened).
 */
const previewPolicy = "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'";

/** spec §4.9 inbound routes and received emails, and the signed links received emails hand out. */
export function registerInboundRoutes(routes: Routes, inbound: InboundService): void {
  routes.get('/v1/inbound/routes', ({ project }) => inbound.listRoutes(project.id));
  routes.post('/v1/inbound/routes', async ({ project, json }) => inbound.createRoute(project.id, parseInput(createRouteSchema, await json())));
  routes.patch('/v1/inbound/routes/:routeId', async ({ project, params, json }) => inbound.updateRoute(project.id, params.routeId, parseInput(updateRouteSchema, await json())));
  routes.delete('/v1/inbound/routes/:routeId', ({ project, params }) => inbound.deleteRoute(project.id, params.routeId));

  routes.get('/v1/inbound/emails', ({ project, query }) => inbound.listReceived(project.id, parseInput(listReceivedSchema, query, 'query')));
  routes.get('/v1/inbound/emails/:id', ({ project, params }) => inbound.getReceived(project.id, params.id));

  const serveSignedFile = (ctx: RequestContext<null>) => signedFileResponse(inbound.readSignedFile(ctx.params.token), previewPolicy);
  routes.public('get', `${inboundFilesPath}:token`, serveSignedFile);
  routes.public('head', `${inboundFilesPath}:token`, serveSignedFile);
}
