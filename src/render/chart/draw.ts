import { encodePng } from './png.js';
import {
  Coverage,
  fillArea,
  fillCircle,
  fillTopRoundedRect,
  horizontalLine,
  strokePolyline,
  Surface,
  type Point,
  type Rgb,
} from './raster.js';

export interface ChartSpec {
  data: number[];
  chartType: 'line' | 'bar';
  curve: 'monotone' | 'linear';
  fill: boolean;
  /** Y-axis maximum; undefined picks a round number above the largest value. */
  maxValue?: number;
  /** Series colour as [r, g, b] in 0..255. */
  color: [number, number, number];
  /** CSS pixels; the bitmap is drawn at `scale` times this for sharp display on high-density screens. */
  width: number;
  height: number;
  scale: number;
}

const grid: Rgb = [0.55, 0.58, 0.63];

/**
 * Draws the chart on a transparent background: grid lines are translucent grey and the series uses the
 * highlight colour, so the same bitmap reads well on the light card and on the dark-mode card.
 */
export function drawChart(spec: ChartSpec): Buffer {
  const s = spec.scale;
  const w = Math.max(1, Math.round(spec.width * s));
  const h = Math.max(1, Math.round(spec.height * s));
  const surface = new Surface(w, h);
  const color: Rgb = [spec.color[0] / 255, spec.color[1] / 255, spec.color[2] / 255];
  const data = spec.data.map((v) => (Number.isFinite(v) && v > 0 ? v : 0));
  const yMax = spec.maxValue && spec.maxValue > 0 ? spec.maxValue : niceMax(Math.max(0, ...data));
  const plot = { top: 8 * s, bottom: h - 1 * s, left: 0, right: w };
  drawGrid(surface, plot, s);
  if (spec.chartType === 'bar') drawBars(surface, data, yMax, plot, spec, color);
  else drawLine(surface, data, yMax, plot, spec, color);
  return encodePng(w, h, surface.toRgba());
}

interface Plot {
  top: number;
  bottom: number;
  left: number;
  right: number;
}

function drawGrid(surface: Surface, plot: Plot, s: number): void {
  for (let k = 0; k <= 4; k++) {
    const y = plot.top + ((plot.bottom - plot.top) * k) / 4;
    const baseline = k === 4;
    const thickness = s;
    horizontalLine(surface, baseline ? plot.bottom - thickness : y - thickness / 2, plot.left, plot.right, thickness, grid, baseline ? 0.5 : 0.22);
  }
}

function yOf(value: number, yMax: number, plot: Plot): number {
  const v = Math.min(value, yMax) / yMax;
  return plot.bottom - v * (plot.bottom - plot.top);
}

function drawLine(surface: Surface, data: number[], yMax: number, plot: Plot, spec: ChartSpec, color: Rgb): void {
  const s = spec.scale;
  const lineWidth = 2.5 * s;
  const inset = 5 * s;
  const left = plot.left + inset;
  const right = plot.right - inset;
  if (data.length === 0) return;
  if (data.length === 1) {
    fillCircle(surface, (left + right) / 2, yOf(data[0]!, yMax, plot), 4 * s, color, 1);
    return;
  }
  const step = (right - left) / (data.length - 1);
  const knots = data.map((v, i) => ({ x: left + i * step, y: yOf(v, yMax, plot) }));
  const path = spec.curve === 'linear' ? knots : monotonePath(knots);
  if (spec.fill) fillArea(surface, path, plot.bottom - s, color, 0.3, 0.02, plot.top);
  const mask = new Coverage(surface.width, surface.height);
  strokePolyline(mask, path, lineWidth);
  surface.fillMask(mask, color, 1);
  const dots = data.length <= 12 ? knots : [knots[knots.length - 1]!];
  for (const p of dots) fillCircle(surface, p.x, p.y, (p === knots[knots.length - 1] ? 4 : 3) * s, color, 1);
}

function drawBars(surface: Surface, data: number[], yMax: number, plot: Plot, spec: ChartSpec, color: Rgb): void {
  if (data.length === 0) return;
  const s = spec.scale;
  const slot = (plot.right - plot.left) / data.length;
  const barWidth = Math.min(slot * 0.62, 56 * s);
  const radius = Math.min(5 * s, barWidth / 3);
  const baseline = plot.bottom - s;
  data.forEach((v, i) => {
    const x0 = plot.left + slot * i + (slot - barWidth) / 2;
    // `fill` paints the full-height track behind each bar, so bars read as a share of the maximum.
    if (spec.fill) fillTopRoundedRect(surface, x0, plot.top, x0 + barWidth, baseline, radius, color, 0.12);
    const top = yOf(v, yMax, plot);
    if (baseline - top >= 0.5) fillTopRoundedRect(surface, x0, Math.min(top, baseline - s), x0 + barWidth, baseline, radius, color, 1);
  });
}

/**
 * Monotone cubic interpolation (Fritsch–Carlson, as in d3's curveMonotoneX): smooth, yet never
 * overshoots the data, so a curve between 0 and 0 stays on zero and a peak is drawn where it is.
 */
export function monotonePath(points: Point[], stepsPerSegment = 20): Point[] {
  const n = points.length;
  if (n < 3) return points;
  const h = points[1]!.x - points[0]!.x;
  const slopes = points.slice(0, -1).map((p, i) => (points[i + 1]!.y - p.y) / h);
  const tangents = points.map((_, i) => {
    if (i === 0 || i === n - 1) return 0;
    const s0 = slopes[i - 1]!;
    const s1 = slopes[i]!;
    if (s0 * s1 <= 0) return 0;
    return (Math.sign(s0) + Math.sign(s1)) * Math.min(Math.abs(s0), Math.abs(s1), 0.25 * Math.abs(s0 + s1));
  });
  // End tangents: d3's one-sided estimate, so the first and last segments bend naturally.
  tangents[0] = endTangent(slopes[0]!, tangents[1]!);
  tangents[n - 1] = endTangent(slopes[n - 2]!, tangents[n - 2]!);
  const out: Point[] = [points[0]!];
  for (let i = 0; i < n - 1; i++) {
    const a = points[i]!;
    const b = points[i + 1]!;
    const c1 = { x: a.x + h / 3, y: a.y + (h / 3) * tangents[i]! };
    const c2 = { x: b.x - h / 3, y: b.y - (h / 3) * tangents[i + 1]! };
    for (let k = 1; k <= stepsPerSegment; k++) out.push(cubic(a, c1, c2, b, k / stepsPerSegment));
  }
  return out;
}

function endTangent(slope: number, neighbour: number): number {
  return (3 * slope - neighbour) / 2;
}

function cubic(a: Point, b: Point, c: Point, d: Point, t: number): Point {
  const u = 1 - t;
  return {
    x: u * u * u * a.x + 3 * u * u * t * b.x + 3 * u * t * t * c.x + t * t * t * d.x,
    y: u * u * u * a.y + 3 * u * u * t * b.y + 3 * u * t * t * c.y + t * t * t * d.y,
  };
}

/** A round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^n) at least 5% above the largest value. */
export function niceMax(max: number): number {
  if (max <= 0) return 1;
  const target = max * 1.05;
  const power = 10 ** Math.floor(Math.log10(target));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * power >= target) return m * power;
  return 10 * power;
}
