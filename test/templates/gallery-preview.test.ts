import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { startAppliance, type ApiResponse, type TestAppliance } from '../helpers/appliance.js';

let app: TestAppliance;
before(async () => {
  app = await startAppliance();
});
after(() => app.stop());

function assertError(res: ApiResponse, status: number, code: string, messagePart?: string) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body.errorCode, code, JSON.stringify(res.body));
  if (messagePart) assert.ok(res.body.developerMessage.includes(messagePart), res.body.developerMessage);
}

describe('gallery and fonts', () => {
  test('GET /v1/templates/gallery answers {data} of ready-made templates with every spec field', async () => {
    const res = await app.api('GET', '/v1/templates/gallery');
    assert.equal(res.status, 200, JSON.stringify(res.body).slice(0, 300));
    assert.ok(Array.isArray(res.body.data));
    assert.ok(res.body.data.length >= 8, `at least 8 gallery templates, got ${res.body.data.length}`);
    const slugs = new Set<string>();
    for (const t of res.body.data) {
      assert.equal(typeof t.name, 'string');
      assert.equal(typeof t.slug, 'string');
      assert.ok(Array.isArray(t.tags));
      assert.equal(typeof t.subject, 'string');
      assert.equal(t.version, 2);
      assert.ok(Array.isArray(t.content) && t.content.length > 0);
      assert.equal(typeof t.sampleProps, 'object');
      assert.ok(!('id' in t), 'a gallery template has no saved id');
      slugs.add(t.slug);
    }
    assert.equal(slugs.size, res.body.data.length, 'slugs are unique');
  });

  test('every gallery template can be POSTed as-is to create a template, and renders with its sampleProps', async () => {
    const gallery = (await app.api('GET', '/v1/templates/gallery')).body.data;
    for (const item of gallery) {
      const created = await app.api('POST', '/v1/templates', item);
      assert.equal(created.status, 200, `${item.slug}: ${JSON.stringify(created.body).slice(0, 400)}`);
      const data = created.body.data;
      assert.equal(data.name, item.name);
      assert.equal(data.subject, item.subject);
      assert.deepEqual(data.sampleProps, item.sampleProps);
      assert.equal(data.content.length, item.content.length);
      assert.equal(data.version, 2);

      // Preview without templateProps uses the saved sampleProps.
      const preview = await app.api('POST', `/v1/templates/${data.id}/preview`, {});
      assert.equal(preview.status, 200, `${item.slug}: ${JSON.stringify(preview.body).slice(0, 400)}`);
      assert.ok(preview.body.html.length > 500, item.slug);
      assert.ok(preview.body.text.length > 0, item.slug);
      assert.ok(!preview.body.html.includes('cid:'), `${item.slug}: preview images are data URIs, not cid:`);

      // The unsaved preview takes the gallery template as-is too.
      const unsaved = await app.api('POST', '/v1/templates/preview', item);
      assert.equal(unsaved.status, 200, `${item.slug}: ${JSON.stringify(unsaved.body).slice(0, 400)}`);
      assert.equal(unsaved.body.subject, preview.body.subject);
    }
    // Posting the same gallery template again is a duplicate name.
    assertError(await app.api('POST', '/v1/templates', gallery[0]), 403, 'resource-duplicate');
  });

  test('GET /v1/templates/fonts answers {data} of {name, category, variants, subsets}', async () => {
    const res = await app.api('GET', '/v1/templates/fonts');
    assert.equal(res.status, 200);
    assert.ok(res.body.data.length > 5);
    for (const font of res.body.data) {
      assert.deepEqual(Object.keys(font).sort(), ['category', 'name', 'subsets', 'variants']);
      assert.equal(typeof font.name, 'string');
      assert.ok(Array.isArray(font.variants) && font.variants.length > 0);
      assert.ok(Array.isArray(font.subsets) && font.subsets.length > 0);
    }
  });

  test('gallery and fonts are not taken for template ids and need a key', async () => {
    assert.equal((await app.api('GET', '/v1/templates/gallery', undefined, { key: null })).status, 401);
    // A template id route does not take gallery: the gallery path, which takes GET only, answers 405.
    assertError(await app.api('PATCH', '/v1/templates/gallery', { subject: 'x' }), 405, 'method-not-allowed');
  });
});

describe('preview', () => {
  const content = [
    { type: 'text', text: 'Hello {name}' },
    { type: 'button', label: 'Open {label}', url: '{link}' },
  ];

  test('saved preview renders {subject, html, text} with templateProps and the project design', async () => {
    const created = await app.api('POST', '/v1/templates', { name: 'preview-basic', subject: 'Hi {name}', content, sampleProps: { name: 'Sample' } });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const id = created.body.data.id;

    const withProps = await app.api('POST', `/v1/templates/${id}/preview`, { templateProps: { name: 'Ada', label: 'docs', link: 'https://example.com/docs' } });
    assert.equal(withProps.status, 200, JSON.stringify(withProps.body));
    assert.deepEqual(Object.keys(withProps.body).sort(), ['html', 'subject', 'text']);
    assert.equal(withProps.body.subject, 'Hi Ada');
    assert.ok(withProps.body.html.includes('Hello Ada'));
    assert.ok(withProps.body.html.includes('https://example.com/docs'));
    assert.ok(withProps.body.text.includes('Hello Ada'));

    // No body at all: the sampleProps fill in; a prop missing from both renders as its bare name.
    const sample = await app.api('POST', `/v1/templates/${id}/preview`);
    assert.equal(sample.status, 200, JSON.stringify(sample.body));
    assert.equal(sample.body.subject, 'Hi Sample');
    assert.ok(sample.body.html.includes('Open label'));

    // The project design reaches the layout.
    const design = await app.api('PATCH', '/v1/project', { emailTemplateDesign: { footerTextTransactional: 'Footer from the design 7f3a' } });
    assert.equal(design.status, 200, JSON.stringify(design.body));
    const branded = await app.api('POST', `/v1/templates/${id}/preview`, { templateProps: { name: 'Ada' } });
    assert.ok(branded.body.html.includes('Footer from the design 7f3a'));
  });

  test('a <script> or attribute-breaking prop shows as text, never as markup', async () => {
    const created = await app.api('POST', '/v1/templates', { name: 'preview-escape', subject: 'Hi {name}', content });
    const id = created.body.data.id;
    const res = await app.api('POST', `/v1/templates/${id}/preview`, {
      templateProps: { name: '<script>alert(1)</script>', label: '"><img src=x onerror=alert(2)>', link: 'https://example.com/?q="><img src=x onerror=alert(3)>' },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const { html, text, subject } = res.body;
    assert.ok(!/<script>alert/i.test(html), 'no script element');
    assert.ok(!/<img[^>]*onerror/i.test(html), 'no injected img element');
    assert.ok(html.includes('&lt;script&gt;alert(1)&lt;/script&gt;'), 'the script shows as text');
    assert.ok(text.includes('<script>alert(1)</script>'), 'the plain text shows the value verbatim');
    assert.equal(subject, 'Hi <script>alert(1)</script>');
  });

  test('unsaved preview renders a whole template; its fields are validated like a create', async () => {
    const res = await app.api('POST', '/v1/templates/preview', { subject: 'Draft {n}', content, preheader: 'Peek', templateProps: { name: 'Bo', n: '1' } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.subject, 'Draft 1');
    assert.ok(res.body.html.includes('Hello Bo'));
    assert.ok(res.body.html.includes('Peek'), 'preheader is in the html');

    const withText = await app.api('POST', '/v1/templates/preview', { subject: 's', content, emailText: 'Custom text {name}', templateProps: { name: 'Bo' } });
    assert.equal(withText.status, 200);
    assert.ok(withText.body.text.includes('Custom text Bo'));

    assertError(await app.api('POST', '/v1/templates/preview', { content }), 400, 'parameters-invalid', 'subject');
    assertError(await app.api('POST', '/v1/templates/preview', { subject: 's', preheader: 'p'.repeat(201) }), 400, 'parameters-invalid', 'preheader:');
    assertError(
      await app.api('POST', '/v1/templates/preview', { subject: 's', content: [{ type: 'box', columns: [{ elements: [{ type: 'image' }] }] }] }),
      400,
      'parameters-invalid',
      'content[0].columns[0].elements[0]',
    );
    assertError(await app.api('POST', '/v1/templates/preview', { subject: 's', templateProps: 'x' }), 400, 'parameters-invalid', 'templateProps');
  });

  test('saved preview of an unknown template → 404 not-found; bad templateProps → 400', async () => {
    assertError(await app.api('POST', '/v1/templates/0123456789abcdef01234567/preview', {}), 404, 'not-found');
    const created = await app.api('POST', '/v1/templates', { name: 'preview-bad-props', subject: 's' });
    assertError(await app.api('POST', `/v1/templates/${created.body.data.id}/preview`, { templateProps: [1] }), 400, 'parameters-invalid', 'templateProps');
  });
});
