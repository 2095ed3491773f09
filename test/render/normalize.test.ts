import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { normalizeContent } from '../../src/render/index.js';
import { AppError } from '../../src/lib/errors.js';

function invalid(content: unknown, ...parts: string[]): void {
  assert.throws(
    () => normalizeContent(content),
    (err: unknown) => {
      assert.ok(err instanceof AppError, String(err));
      assert.equal(err.code, 'parameters-invalid');
      for (const part of parts) assert.ok(err.message.includes(part), `"${err.message}" should include "${part}"`);
      return true;
    },
  );
}

describe('normalizeContent', () => {
  test('assigns ids when missing or duplicated, nested box columns included, keeping the first holder', () => {
    const out = normalizeContent([
      { type: 'text', text: 'a', id: 'keep' },
      { type: 'text', text: 'b', id: 'keep' },
      { type: 'text', text: 'c' },
      { type: 'box', columns: [{ elements: [{ type: 'text', text: 'd', id: 'keep' }, { type: 'divider' }, { type: 'text', text: 'e', id: 'text-1' }] }] },
    ]);
    const ids = [out[0]!.id, out[1]!.id, out[2]!.id, out[3]!.id];
    const nested = (out[3] as { columns: { elements: { id: string }[] }[] }).columns[0]!.elements.map((e) => e.id);
    assert.equal(ids[0], 'keep');
    const all = [...ids, ...nested];
    assert.equal(new Set(all).size, all.length, `unique: ${all.join(',')}`);
    assert.ok(all.every((id) => typeof id === 'string' && id.length > 0));
    assert.equal(nested[2], 'text-1', 'an explicit id that does not collide is kept');
  });

  test('is deterministic and does not mutate its input', () => {
    const input = [{ type: 'text', text: 'a' }];
    assert.deepEqual(normalizeContent(input), normalizeContent(input));
    assert.equal('id' in input[0]!, false);
  });

  test('keeps unknown fields so content from newer editors round-trips', () => {
    const [node] = normalizeContent([{ type: 'text', text: 'a', editorMeta: { x: 1 }, styles: { futureStyle: 'x' } }]);
    assert.deepEqual((node as unknown as { editorMeta: unknown }).editorMeta, { x: 1 });
  });

  test('null and undefined mean no content', () => {
    assert.deepEqual(normalizeContent(null), []);
    assert.deepEqual(normalizeContent(undefined), []);
  });

  test('errors name the path and the rule', () => {
    invalid('nope', 'content', 'expected array');
    invalid([{ type: 'banner' }], 'content[0].type', 'unknown node type', 'text, button');
    invalid([{ type: 'text' }], 'content[0].text');
    invalid([{ type: 'text', text: 'ok' }, { type: 'text', text: 'ok' }, { type: 'text', text: 'ok' }, { type: 'box', columns: [{ elements: [{ type: 'text', text: 'a' }] }, { elements: [{ type: 'text', text: 'b' }, { type: 'button', label: 'x', url: 'javascript:alert(1)' }] }] }],
      'content[3].columns[1].elements[1].url', 'http(s)');
    invalid([{ type: 'text', text: 'x', styles: { color: 'red;background:url(x)' } }], 'content[0].styles.color', 'colour');
    invalid([{ type: 'text', text: 'x', styles: { dark: { backgroundColor: 'nope nope' } } }], 'content[0].styles.dark.backgroundColor');
    invalid([{ type: 'text', text: 'x', styles: { mobile: { stackColumns: 'yes' } } }], 'content[0].styles.mobile.stackColumns');
    invalid([{ type: 'code', code: 'x', language: 'cobol' }], 'content[0].language', 'javascript');
    invalid([{ type: 'chart', dataKey: 'd', chartType: 'pie' }], 'content[0].chartType');
    invalid([{ type: 'chart', dataKey: 'd', chartType: 'line', maxValue: -1 }], 'content[0].maxValue');
    invalid([{ type: 'table', columns: [{ label: 'a', align: 'middle' }], rows: [] }], 'content[0].columns[0].align');
    invalid([{ type: 'image', src: 'javascript:alert(1)', alt: '' }], 'content[0].src');
    invalid([{ type: 'box', columns: [] }], 'content[0].columns');
  });

  test('URL fields accept variables, but not a dangerous literal scheme', () => {
    normalizeContent([{ type: 'button', label: 'x', url: '{url}' }, { type: 'button', label: 'x', url: 'https://x.example/{id}' }, { type: 'button', label: 'x', url: '' }]);
    invalid([{ type: 'button', label: 'x', url: 'javascript:{code}' }], 'content[0].url');
  });

  test('language aliases normalise to the canonical names', () => {
    const [node] = normalizeContent([{ type: 'code', code: 'x', language: 'JS' }]);
    assert.equal((node as { language: string }).language, 'javascript');
  });

  test('boxes nest at most six deep', () => {
    let node: unknown = { type: 'text', text: 'deep' };
    for (let i = 0; i < 6; i++) node = { type: 'box', columns: [{ elements: [node] }] };
    normalizeContent([node]);
    invalid([{ type: 'box', columns: [{ elements: [node] }] }], 'nest at most');
  });

  test('content holds at most 2,000 nodes in all, the elements of boxes included', () => {
    const texts = (n: number) => Array.from({ length: n }, () => ({ type: 'text', text: 'x' }));
    // Two boxes of 999 elements: 2,000 nodes with the boxes themselves.
    normalizeContent([{ type: 'box', columns: [{ elements: texts(999) }] }, { type: 'box', columns: [{ elements: texts(999) }] }]);
    invalid([{ type: 'box', columns: [{ elements: texts(999) }] }, { type: 'box', columns: [{ elements: texts(1000) }] }], 'more than 2,000 nodes in all');
    // Each list within its own cap, boxes of 2,000 in a box: 4,000,000 nodes, refused without validating them.
    const inner = { type: 'box', columns: [{ elements: texts(2000) }] };
    const wide = { type: 'box', columns: [{ elements: Array.from({ length: 2000 }, () => inner) }] };
    invalid([wide], 'more than 2,000 nodes in all');
  });
});
