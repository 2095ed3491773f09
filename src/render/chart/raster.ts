/**
 * A tiny anti-aliased rasteriser for charts: premultiplied RGBA floats, shapes drawn as coverage
 * (0..1 per pixel) computed from distances, composited source-over. Enough for lines, areas, bars, dots
 * and grid lines; no text (labels are HTML next to the image, so they stay sharp and selectable).
 */

export type Rgb = [number, number, number];

export interface Point {
  x: number;
  y: number;
}

export class Surface {
  readonly data: Float32Array;

  constructor(readonly width: number, readonly height: number) {
    this.data = new Float32Array(width * height * 4);
  }

  /** Source-over of a colour at `alpha * coverage`. */
  blend(x: number, y: number, color: Rgb, alpha: number): void {
    if (alpha <= 0 || x < 0 || y < 0 || x >= this.width || y >= this.height) return;
    const a = Math.min(1, alpha);
    const i = (y * this.width + x) * 4;
    const d = this.data;
    const keep = 1 - a;
    d[i] = color[0] * a + d[i]! * keep;
    d[i + 1] = color[1] * a + d[i + 1]! * keep;
    d[i + 2] = color[2] * a + d[i + 2]! * keep;
    d[i + 3] = a + d[i + 3]! * keep;
  }

  /** Composites a coverage mask (same size as the surface). */
  fillMask(mask: Coverage, color: Rgb, alpha: number): void {
    for (let y = mask.minY; y <= mask.maxY; y++) {
      for (let x = mask.minX; x <= mask.maxX; x++) {
        const c = mask.values[y * this.width + x]!;
        if (c > 0) this.blend(x, y, color, c * alpha);
      }
    }
  }

  /** Straight-alpha bytes for the PNG encoder. */
  toRgba(): Uint8Array {
    const out = new Uint8Array(this.width * this.height * 4);
    const d = this.data;
    for (let i = 0; i < d.length; i += 4) {
      const a = d[i + 3]!;
      if (a <= 0) continue;
      const scale = 255 / a;
      out[i] = clampByte(d[i]! * scale);
      out[i + 1] = clampByte(d[i + 1]! * scale);
      out[i + 2] = clampByte(d[i + 2]! * scale);
      out[i + 3] = clampByte(a * 255);
    }
    return out;
  }
}

/** Per-pixel coverage with a dirty rectangle, so compositing only visits touched pixels. */
export class Coverage {
  readonly values: Float32Array;
  minX = Infinity;
  minY = Infinity;
  maxX = -Infinity;
  maxY = -Infinity;

  constructor(readonly width: number, readonly height: number) {
    this.values = new Float32Array(width * height);
  }

  /** Keeps the maximum so overlapping segments of one stroke do not darken the joints. */
  max(x: number, y: number, c: number): void {
    if (c <= 0 || x < 0 || y < 0 || x >= this.width || y >= this.height) return;
    const i = y * this.width + x;
    if (c > this.values[i]!) this.values[i] = Math.min(1, c);
    if (x < this.minX) this.minX = x;
    if (x > this.maxX) this.maxX = x;
    if (y < this.minY) this.minY = y;
    if (y > this.maxY) this.maxY = y;
  }
}

/** A polyline stroked with round joins and caps: coverage from the distance to the nearest segment. */
export function strokePolyline(mask: Coverage, points: Point[], lineWidth: number): void {
  const half = lineWidth / 2;
  for (let s = 0; s < points.length - 1; s++) {
    const a = points[s]!;
    const b = points[s + 1]!;
    const x0 = Math.floor(Math.min(a.x, b.x) - half - 1);
    const x1 = Math.ceil(Math.max(a.x, b.x) + half + 1);
    const y0 = Math.floor(Math.min(a.y, b.y) - half - 1);
    const y1 = Math.ceil(Math.max(a.y, b.y) + half + 1);
    for (let y = y0; y <= y1; y++) {
      for (let x = x0; x <= x1; x++) {
        const d = distanceToSegment(x + 0.5, y + 0.5, a, b);
        mask.max(x, y, half + 0.5 - d);
      }
    }
  }
}

export function distanceToSegment(px: number, py: number, a: Point, b: Point): number {
  const dx = b.x - a.x;
  const dy = b.y - a.y;
  const len2 = dx * dx + dy * dy;
  const t = len2 === 0 ? 0 : Math.max(0, Math.min(1, ((px - a.x) * dx + (py - a.y) * dy) / len2));
  const cx = a.x + t * dx;
  const cy = a.y + t * dy;
  return Math.hypot(px - cx, py - cy);
}

/**
 * The area between a polyline (x increasing) and a baseline, with a vertical alpha gradient from
 * `topAlpha` at `gradientTop` to `bottomAlpha` at the baseline. The upper edge is anti-aliased by the
 * fraction of each pixel that lies below the curve.
 */
export function fillArea(surface: Surface, points: Point[], baseline: number, color: Rgb, topAlpha: number, bottomAlpha: number, gradientTop: number): void {
  if (points.length < 2) return;
  const first = points[0]!;
  const last = points[points.length - 1]!;
  let seg = 0;
  for (let x = Math.floor(first.x); x < Math.ceil(last.x); x++) {
    const cx = Math.min(Math.max(x + 0.5, first.x), last.x);
    while (seg < points.length - 2 && points[seg + 1]!.x < cx) seg++;
    const a = points[seg]!;
    const b = points[seg + 1]!;
    const t = b.x === a.x ? 0 : (cx - a.x) / (b.x - a.x);
    const curveY = a.y + (b.y - a.y) * t;
    const horizontal = Math.min(1, Math.min(x + 1, last.x) - Math.max(x, first.x));
    for (let y = Math.max(0, Math.floor(curveY)); y < Math.ceil(baseline); y++) {
      const vertical = Math.min(1, y + 1 - curveY, baseline - y);
      if (vertical <= 0) continue;
      const g = Math.max(0, Math.min(1, (y + 0.5 - gradientTop) / Math.max(1, baseline - gradientTop)));
      surface.blend(x, y, color, vertical * horizontal * (topAlpha + (bottomAlpha - topAlpha) * g));
    }
  }
}

/** Rectangle with rounded top corners (bars), anti-aliased through a signed distance. */
export function fillTopRoundedRect(surface: Surface, x0: number, y0: number, x1: number, y1: number, radius: number, color: Rgb, alpha: number): void {
  const r = Math.max(0, Math.min(radius, (x1 - x0) / 2, y1 - y0));
  for (let y = Math.floor(y0); y < Math.ceil(y1); y++) {
    for (let x = Math.floor(x0); x < Math.ceil(x1); x++) {
      const px = x + 0.5;
      const py = y + 0.5;
      let coverage: number;
      if (py < y0 + r && (px < x0 + r || px > x1 - r)) {
        const cx = px < x0 + r ? x0 + r : x1 - r;
        coverage = r + 0.5 - Math.hypot(px - cx, py - (y0 + r));
      } else {
        coverage = Math.min(px - x0 + 0.5, x1 - px + 0.5, py - y0 + 0.5, y1 - py + 0.5);
      }
      surface.blend(x, y, color, Math.max(0, Math.min(1, coverage)) * alpha);
    }
  }
}

export function fillCircle(surface: Surface, cx: number, cy: number, radius: number, color: Rgb, alpha: number): void {
  for (let y = Math.floor(cy - radius - 1); y <= Math.ceil(cy + radius + 1); y++) {
    for (let x = Math.floor(cx - radius - 1); x <= Math.ceil(cx + radius + 1); x++) {
      const c = radius + 0.5 - Math.hypot(x + 0.5 - cx, y + 0.5 - cy);
      if (c > 0) surface.blend(x, y, color, Math.min(1, c) * alpha);
    }
  }
}

/** Horizontal line `thickness` pixels tall starting at `y` (grid lines). */
export function horizontalLine(surface: Surface, y: number, x0: number, x1: number, thickness: number, color: Rgb, alpha: number): void {
  for (let yy = Math.floor(y); yy < Math.ceil(y + thickness); yy++) {
    const vertical = Math.min(1, yy + 1 - y, y + thickness - yy);
    for (let x = Math.max(0, Math.floor(x0)); x < Math.min(surface.width, Math.ceil(x1)); x++) surface.blend(x, yy, color, vertical * alpha);
  }
}

function clampByte(v: number): number {
  return v <= 0 ? 0 : v >= 255 ? 255 : Math.round(v);
}
