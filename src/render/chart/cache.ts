import { createHash } from 'node:crypto';
import { Lru } from '../lru.js';
import { generatedContentId } from '../types.js';
import { drawChart, type ChartSpec } from './draw.js';

export interface ChartImage {
  png: Buffer;
  /** Stable content id: the same chart in two emails is the same attachment. */
  cid: string;
  dataUri: () => string;
}

/**
 * Chart bitmaps are cached by everything that affects their pixels (data, options, colour, size), so a
 * template rendered for many recipients with the same data rasterises once; the bound keeps memory flat
 * when every recipient has their own numbers.
 */
const cache = new Lru<string, ChartImage>(256);

export function chartImage(spec: ChartSpec): ChartImage {
  const key = JSON.stringify([spec.data, spec.chartType, spec.curve, spec.fill, spec.maxValue ?? null, spec.color, spec.width, spec.height, spec.scale]);
  return cache.getOrCreate(key, () => {
    const png = drawChart(spec);
    const hash = createHash('sha256').update(key).digest('hex').slice(0, 20);
    let uri: string | undefined;
    return { png, cid: generatedContentId('chart', hash), dataUri: () => (uri ??= `data:image/png;base64,${png.toString('base64')}`) };
  });
}
