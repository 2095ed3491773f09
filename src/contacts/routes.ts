import type { Routes } from '../http/router.js';
import { emptyArrayAsObject, notAJsonObjectMessage, parseInput } from '../http/validate.js';
import { AppError } from '../lib/errors.js';
import { listContactsSchema, queryContactsSchema, upsertContactSchema } from './schemas.js';
import type { ContactsService } from './service.js';

/** spec §4.5 contacts. Addresses in the path arrive raw or percent-encoded (COMPAT.md); the router decodes them. */
export function registerContactRoutes(routes: Routes, contacts: ContactsService): void {
  // COMPAT.md: paging may come in the query string too (`?offset=20&limit=20`); the body wins.
  routes.post('/v1/contacts/query', async ({ project, json, query }) => {
    const body = emptyArrayAsObject((await json()) ?? {});
    if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new AppError('parameters-invalid', notAJsonObjectMessage(body, 'body'));
    const paging = Object.fromEntries(['offset', 'limit'].filter((key) => query[key] !== undefined && query[key] !== '' && (body as Record<string, unknown>)[key] === undefined).map((key) => [key, query[key]]));
    return contacts.query(project.id, parseInput(queryContactsSchema, { ...paging, ...body }));
  });
  routes.post('/v1/contacts', async ({ project, json }) => contacts.upsert(project.id, parseInput(upsertContactSchema, await json())));
  routes.get('/v1/contacts', ({ project, query }) => contacts.list(project.id, parseInput(listContactsSchema, query, 'query')));
  routes.get('/v1/contacts/:emailAddress', ({ project, params }) => contacts.find(project.id, params.emailAddress));
  routes.delete('/v1/contacts/:emailAddress', ({ project, params }) => contacts.remove(project.id, params.emailAddress));
}
