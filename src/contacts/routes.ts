import type { Routes } from '../http/router.js';
import { parseInput } from '../http/validate.js';
import { listContactsSchema, queryContactsSchema, upsertContactSchema } from './schemas.js';
import type { ContactsService } from './service.js';

/** spec §4.5 contacts. Addresses in the path arrive raw or percent-encoded (COMPAT.md); the router decodes them. */
export function registerContactRoutes(routes: Routes, contacts: ContactsService): void {
  routes.post('/v1/contacts/query', async ({ project, json }) => contacts.query(project.id, parseInput(queryContactsSchema, (await json()) ?? {})));
  routes.post('/v1/contacts', async ({ project, json }) => contacts.upsert(project.id, parseInput(upsertContactSchema, await json())));
  routes.get('/v1/contacts', ({ project, query }) => contacts.list(project.id, parseInput(listContactsSchema, query, 'query')));
  routes.get('/v1/contacts/:emailAddress', ({ project, params }) => contacts.find(project.id, params.emailAddress));
  routes.delete('/v1/contacts/:emailAddress', ({ project, params }) => contacts.remove(project.id, params.emailAddress));
}
