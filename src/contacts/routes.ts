import type { Routes } from '../http/router.js';
import { jsonObjectBody, parseInput, queryFallbacks } from '../http/validate.js';
import { listContactsSchema, queryContactsQueryStringSchema, queryContactsSchema, upsertContactSchema } from './schemas.js';
import type { ContactsService } from './service.js';

/** spec §4.5 contacts. Addresses in the path arrive raw or percent-encoded (COMPAT.md); the router decodes them. */
export function registerContactRoutes(routes: Routes, contacts: ContactsService): void {
  // COMPAT.md: paging may come in the query string too (`?offset=20&limit=20`); the body wins.
  routes.post('/v1/contacts/query', async ({ project, json, query }) => {
    const body = jsonObjectBody(await json());
    const fromQuery = queryFallbacks(query, body, ['offset', 'limit']);
    // Checked as the query first, so that a bad `?limit=abc` is named where the client put it (as email search does).
    parseInput(queryContactsQueryStringSchema, fromQuery, 'query');
    return contacts.query(project.id, parseInput(queryContactsSchema, { ...fromQuery, ...body }));
  });
  routes.post('/v1/contacts', async ({ project, json }) => contacts.upsert(project.id, parseInput(upsertContactSchema, await json())));
  routes.get('/v1/contacts', ({ project, query }) => contacts.list(project.id, parseInput(listContactsSchema, query, 'query')));
  routes.get('/v1/contacts/:emailAddress', ({ project, params }) => contacts.find(project.id, params.emailAddress));
  routes.delete('/v1/contacts/:emailAddress', ({ project, params }) => contacts.remove(project.id, params.emailAddress));
}
