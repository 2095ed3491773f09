import { recipientPageResponse } from '../http/recipient-page.js';
import type { RequestContext, Routes } from '../http/router.js';
import { jsonObjectBody, parseInput } from '../http/validate.js';
import { tokenAsSent } from '../emails/routes.js';
import { draftPatchSchema, draftUpdateSchema, listDraftsSchema } from './schemas.js';
import type { MessengerService } from './service.js';
import { unsubscribePage, unsubscribePath } from './unsubscribe-page.js';

/** spec §4.7 Messenger drafts, and the unsubscribe link their emails carry. */
export function registerMessengerRoutes(routes: Routes, messenger: MessengerService): void {
  routes.get('/v1/messenger', ({ project, query }) => messenger.list(project.id, parseInput(listDraftsSchema, query, 'query')));
  routes.get('/v1/messenger/:id', ({ project, params }) => messenger.find(project.id, params.id));
  // A draft may be created with no field at all: no body, `{}`, or PHP's `[]` for an empty map.
  routes.post('/v1/messenger', async ({ project, json }) => messenger.create(project.id, parseInput(draftPatchSchema, jsonObjectBody(await json()))));
  routes.patch('/v1/messenger/:id', async ({ project, params, json }) => messenger.update(project.id, params.id, parseInput(draftUpdateSchema, await json())));
  routes.delete('/v1/messenger/:id', ({ project, params }) => messenger.remove(project.id, params.id));

  // GET asks (and HEAD answers as GET, recording nothing); POST unsubscribes: the page's button, and a
  // mailbox provider's one-click request (RFC 8058 §3.2: `List-Unsubscribe=One-Click`, no cookies).
  const ask = (ctx: RequestContext<null>) => {
    const link = messenger.readUnsubscribeLink(tokenAsSent(ctx));
    if (!link) return recipientPageResponse(unsubscribePage({ kind: 'invalid' }), 404);
    if (link.emailAddress === null) return recipientPageResponse(unsubscribePage({ kind: 'gone' }));
    return recipientPageResponse(unsubscribePage(link.isSubscribed ? { kind: 'ask', emailAddress: link.emailAddress } : { kind: 'done' }));
  };
  routes.public('get', `${unsubscribePath}:token`, ask);
  routes.public('head', `${unsubscribePath}:token`, ask);
  routes.public('post', `${unsubscribePath}:token`, async (ctx) => {
    const link = messenger.readUnsubscribeLink(tokenAsSent(ctx));
    if (!link) return recipientPageResponse(unsubscribePage({ kind: 'invalid' }), 404);
    if (link.emailAddress === null) return recipientPageResponse(unsubscribePage({ kind: 'gone' }));
    await messenger.unsubscribe(link);
    return recipientPageResponse(unsubscribePage({ kind: 'done' }));
  });
}
