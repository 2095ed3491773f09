import type { TestAppliance } from '../helpers/appliance.js';

export const baseEmail = { toAddress: 'ann@example.com', fromAddress: 'app@sender.test', subject: 'Hello', text: 'Hi there' };

/** Templates API is another feature; tests store a template row directly. */
export function insertTemplate(app: TestAppliance, fields: { id?: string; name: string; subject: string; content: unknown[]; projectId?: string }): string {
  const id = fields.id ?? (Math.floor(Date.now() / 1000).toString(16) + Math.random().toString(16).slice(2, 18)).padEnd(24, '0').slice(0, 24);
  app.appliance.context.database.sqlite
    .prepare('insert into templates (id, project_id, name, subject, content, created_at, updated_at) values (?, ?, ?, ?, ?, 0, 0)')
    .run(id, fields.projectId ?? app.appliance.defaultProjectId, fields.name, fields.subject, JSON.stringify(fields.content));
  return id;
}

export function emailRow(app: TestAppliance, id: string): Record<string, any> | undefined {
  return app.appliance.context.database.sqlite.prepare('select * from emails where id = ?').get(id) as Record<string, any> | undefined;
}
