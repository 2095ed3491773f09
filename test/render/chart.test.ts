import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { inflateSync } from 'node:zlib';
import { crc32, encodePng } from '../../src/render/chart/png.js';
import { drawChart, monotonePath, niceMax, type ChartSpec } from '../../src/render/chart/draw.js';
import { chartImage } from '../../src/render/chart/cache.js';
import { render } from './helpers.js';

/** Decodes the PNGs our encoder writes (8-bit RGBA, filters 0-4) and checks every chunk CRC. */
function decodePng(png: Buffer): { width: number; height: number; rgba: Uint8Array } {
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  let offset = 8;
  let width = 0;
  let height = 0;
  const idat: Buffer[] = [];
  while (offset < png.length) {
    const length = png.readUInt32BE(offset);
    const type = png.toString('ascii', offset + 4, offset + 8);
    const data = png.subarray(offset + 8, offset + 8 + length);
    assert.equal(png.readUInt32BE(offset + 8 + length), crc32(png, offset + 4, offset + 8 + length), `${type} CRC`);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      assert.deepEqual([...data.subarray(8)], [8, 6, 0, 0, 0]);
    }
    if (type === 'IDAT') idat.push(data);
    offset += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * 4;
  const rgba = new Uint8Array(width * height * 4);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)]!;
    for (let i = 0; i < stride; i++) {
      const x = raw[y * (stride + 1) + 1 + i]!;
      const a = i >= 4 ? rgba[y * stride + i - 4]! : 0;
      const b = y > 0 ? rgba[(y - 1) * stride + i]! : 0;
      const c = i >= 4 && y > 0 ? rgba[(y - 1) * stride + i - 4]! : 0;
      const p = a + b - c;
      const paeth = Math.abs(p - a) <= Math.abs(p - b) && Math.abs(p - a) <= Math.abs(p - c) ? a : Math.abs(p - b) <= Math.abs(p - c) ? b : c;
      rgba[y * stride + i] = (x + [0, a, b, (a + b) >> 1, paeth][filter]!) & 0xff;
    }
  }
  return { width, height, rgba };
}

const base: ChartSpec = { data: [1, 4, 2, 8, 5], chartType: 'line', curve: 'monotone', fill: false, color: [255, 0, 0], width: 200, height: 100, scale: 2 };

function pixel(img: { width: number; rgba: Uint8Array }, x: number, y: number): number[] {
  const i = (y * img.width + x) * 4;
  return [...img.rgba.subarray(i, i + 4)];
}

function countColored(img: { rgba: Uint8Array }, rgb: number[]): number {
  let n = 0;
  for (let i = 0; i < img.rgba.length; i += 4) if (img.rgba[i + 3]! > 200 && img.rgba[i] === rgb[0] && img.rgba[i + 1] === rgb[1] && img.rgba[i + 2] === rgb[2]) n++;
  return n;
}

describe('PNG encoder', () => {
  test('round-trips pixels exactly', () => {
    const w = 7;
    const h = 5;
    const px = new Uint8Array(w * h * 4).map((_, i) => (i * 37 + (i >> 3) * 11) & 0xff);
    const img = decodePng(encodePng(w, h, px));
    assert.equal(img.width, w);
    assert.equal(img.height, h);
    assert.deepEqual([...img.rgba], [...px]);
  });

  test('rejects a buffer of the wrong size', () => {
    assert.throws(() => encodePng(2, 2, new Uint8Array(3)));
  });
});

describe('chart raster', () => {
  test('line chart: 2x bitmap, transparent background, series in the given colour', () => {
    const img = decodePng(drawChart(base));
    assert.equal(img.width, 400);
    assert.equal(img.height, 200);
    assert.equal(pixel(img, 200, 2)[3], 0, 'above the plot is transparent');
    assert.ok(countColored(img, [255, 0, 0]) > 300, 'solid series pixels');
  });

  test('fill adds a translucent area under the line', () => {
    const translucent = (img: { rgba: Uint8Array }) => {
      let n = 0;
      for (let i = 0; i < img.rgba.length; i += 4) if (img.rgba[i] === 255 && img.rgba[i + 3]! > 0 && img.rgba[i + 3]! < 120) n++;
      return n;
    };
    assert.ok(translucent(decodePng(drawChart({ ...base, fill: true }))) > translucent(decodePng(drawChart(base))) + 5000);
  });

  test('bar chart: one bar per value, heights follow maxValue', () => {
    const img = decodePng(drawChart({ ...base, chartType: 'bar', data: [10, 5], maxValue: 10 }));
    const column = (x: number) => {
      let top = -1;
      for (let y = 0; y < img.height; y++) if (pixel(img, x, y)[3]! > 250 && pixel(img, x, y)[0] === 255) { top = y; break; }
      return top;
    };
    const first = column(100);
    const second = column(300);
    assert.ok(first > 0 && second > first, `${first} ${second}`);
    const plotTop = 16;
    const bottom = 198;
    assert.ok(Math.abs(first - plotTop) <= 2, 'value = maxValue reaches the top');
    assert.ok(Math.abs(second - (plotTop + bottom) / 2) <= 3, 'half the value, half the height');
  });

  test('values above maxValue are clamped; empty and single-value data still draw', () => {
    decodePng(drawChart({ ...base, data: [100], maxValue: 10 }));
    decodePng(drawChart({ ...base, data: [] }));
    decodePng(drawChart({ ...base, chartType: 'bar', data: [0, 0] }));
  });

  test('monotone interpolation never overshoots the data', () => {
    const knots = [0, 0, 10, 10, 3, 3, 8].map((v, i) => ({ x: i * 10, y: v }));
    for (const p of monotonePath(knots)) {
      const seg = Math.min(Math.floor(p.x / 10), knots.length - 2);
      const lo = Math.min(knots[seg]!.y, knots[seg + 1]!.y);
      const hi = Math.max(knots[seg]!.y, knots[seg + 1]!.y);
      assert.ok(p.y >= lo - 1e-9 && p.y <= hi + 1e-9, `${p.x},${p.y} outside ${lo}..${hi}`);
    }
  });

  test('niceMax picks round numbers above the data', () => {
    assert.equal(niceMax(0), 1);
    assert.equal(niceMax(95), 100);
    assert.equal(niceMax(2380), 2500);
    assert.equal(niceMax(61), 80);
  });

  test('chart PNGs are cached by data and options', () => {
    const a = chartImage(base);
    assert.equal(chartImage({ ...base, data: [...base.data] }), a, 'same data, same cached image');
    assert.notEqual(chartImage({ ...base, data: [1, 2, 3] }).cid, a.cid);
    assert.notEqual(chartImage({ ...base, fill: true }).cid, a.cid);
  });
});

describe('chart node', () => {
  const node = { type: 'chart', dataKey: 'series', chartType: 'line', xAxisStartLabel: 'Mon {w}', xAxisEndLabel: 'Sun' };

  test('cid mode: the PNG is an inline image referenced by cid:', () => {
    const r = render([node], { series: [1, 2, 3], w: 'W1' });
    assert.equal(r.inlineImages.length, 1);
    const [img] = r.inlineImages;
    assert.equal(img!.contentType, 'image/png');
    assert.match(img!.cid, /^chart-[0-9a-f]{20}@postino$/);
    assert.ok(r.html.includes(`src="cid:${img!.cid}"`));
    decodePng(img!.content);
    assert.ok(r.html.includes('>Mon W1</td>'), 'axis labels are HTML with variables');
    // The numbers drawn are in the alt text: a screen reader said only that a chart was there.
    assert.ok(r.html.includes('alt="Line chart from Mon W1 to Sun: 1, 2, 3"'), r.html);
  });

  test("a long series is summed up in the alt text: how many values, the lowest, highest and last", () => {
    const series = Array.from({ length: 40 }, (_, i) => (i === 7 ? 12500.5 : i + 1));
    const r = render([{ type: 'chart', dataKey: 'series', chartType: 'bar' }], { series });
    assert.ok(r.html.includes('alt="Bar chart: 40 values, lowest 1, highest 12,500.5, last 40"'), r.html);
  });

  test('data-uri mode: an inline data URI and no attachments', () => {
    const r = render([node], { series: [1, 2, 3] }, {}, { imageMode: 'data-uri' });
    assert.equal(r.inlineImages.length, 0);
    assert.match(r.html, /src="data:image\/png;base64,[A-Za-z0-9+/=]+"/);
  });

  test('a height given as text is capped at 600 like a number', () => {
    for (const height of [9999, '9999', '9999px']) {
      const [img] = render([{ ...node, styles: { height } }], { series: [1, 2, 3] }).inlineImages;
      // PNGs are drawn at twice the CSS size.
      assert.equal(decodePng(img!.content).height, 1200, JSON.stringify(height));
    }
  });

  test('the same chart twice is one attachment', () => {
    assert.equal(render([node, node], { series: [1, 2, 3] }).inlineImages.length, 1);
  });

  test('with dark mode a lighter variant is swapped in for dark backgrounds', () => {
    const r = render([node], { series: [1, 2, 3] }, { colors: { isDarkModeEnabled: true } });
    assert.equal(r.inlineImages.length, 2);
    assert.match(r.html, /class="il"/);
    assert.match(r.html, /<div class="idk"/);
  });

  test('data from iteration props; non-numbers count as zero', () => {
    const r = render([{ ...node, iterationKey: 'teams' }], { teams: [{ series: [1, 2] }, { series: ['x', -4, 3] }] });
    assert.equal(r.inlineImages.length, 2);
  });
});
