/**
 * CSS value rules shared by the content schema (reject at save time) and the renderer (drop at render
 * time). Style values land inside `style="..."` attributes and `<style>` blocks, so anything that could
 * close a declaration (`;`, `}`), open a URL (`url(`) or smuggle markup is refused by construction: each
 * value must match a narrow pattern, not merely "look safe".
 */

const hexColor = /^#(?:[0-9a-f]{3,4}|[0-9a-f]{6}|[0-9a-f]{8})$/i;
const fnColor = /^(?:rgb|rgba|hsl|hsla)\(\s*[0-9.]+%?\s*(?:,\s*|\s+)[0-9.]+%?\s*(?:,\s*|\s+)[0-9.]+%?\s*(?:(?:,|\/)\s*[0-9.]+%?\s*)?\)$/i;
const namedColor = /^[a-z]{3,20}$/i;
const length = /^-?\d{1,4}(?:\.\d{1,3})?(?:px|%|em|rem)?$/;
const fontFamily = /^[A-Za-z0-9 ,'"_-]{1,200}$/;
const fontWeight = /^(?:normal|bold|bolder|lighter|[1-9]00)$/;
const fontStyle = /^(?:normal|italic|oblique)$/;
const textTransform = /^(?:none|uppercase|lowercase|capitalize)$/;
const textDecoration = /^(?:none|underline|overline|line-through)(?: (?:underline|overline|line-through))*$/;

const maxStyleValueChars = 256;

/**
 * A style value as the patterns read it: trimmed, and only when short. CSS values are; and patterns
 * such as fnColor's take time that grows with a power of the length (a 4 kB colour froze the event
 * loop for seconds).
 */
function shortValue(value: unknown): string | undefined {
  return typeof value === 'string' && value.length <= maxStyleValueChars ? value.trim() : undefined;
}

export function cssColor(value: unknown): string | undefined {
  const v = shortValue(value);
  if (v === undefined) return undefined;
  return hexColor.test(v) || fnColor.test(v) || namedColor.test(v) ? v : undefined;
}

/** Numbers are pixels; strings may carry px, %, em or rem. */
export function cssLength(value: unknown): string | undefined {
  if (typeof value === 'number') return Number.isFinite(value) && Math.abs(value) < 10000 ? `${round(value)}px` : undefined;
  const v = shortValue(value);
  if (v === undefined || !length.test(v)) return undefined;
  return /\d$/.test(v) ? `${v}px` : v;
}

/** Unitless numbers stay unitless (line-height multipliers), strings follow `cssLength`. */
export function cssLineHeight(value: unknown): string | undefined {
  if (typeof value === 'number') return Number.isFinite(value) && value > 0 && value < 1000 ? String(round(value)) : undefined;
  const v = shortValue(value);
  if (v !== undefined && /^\d{1,2}(?:\.\d{1,3})?$/.test(v)) return v;
  return cssLength(value);
}

export function cssFontWeight(value: unknown): string | undefined {
  const v = typeof value === 'number' ? String(value) : (shortValue(value) ?? '');
  return fontWeight.test(v) ? v : undefined;
}

export function cssKeyword(kind: 'fontStyle' | 'textTransform' | 'textDecoration', value: unknown): string | undefined {
  const v = shortValue(value);
  if (v === undefined) return undefined;
  const pattern = kind === 'fontStyle' ? fontStyle : kind === 'textTransform' ? textTransform : textDecoration;
  return pattern.test(v) ? v : undefined;
}

/** Raw family list as written by the user; the caller maps known names to a fallback stack. */
export function cssFontFamily(value: unknown): string | undefined {
  const v = shortValue(value);
  if (v === undefined) return undefined;
  return fontFamily.test(v) ? v.replace(/"/g, "'") : undefined;
}

/**
 * A length the schema accepts (`length`: a number, or a string in px, em or rem) in pixels, for
 * attributes and sizes that must be pixels (an image's height, a width attribute). em and rem are taken
 * at the layout's 16 px; a percentage has no pixel size here (undefined).
 */
export function pixelLength(value: unknown): number | undefined {
  if (typeof value === 'number') return value;
  const match = typeof value === 'string' ? /^\s*(\d{1,4}(?:\.\d{1,3})?)(px|r?em)?\s*$/.exec(value) : null;
  if (!match) return undefined;
  return Number(match[1]) * (match[2] === 'em' || match[2] === 'rem' ? layoutFontPx : 1);
}

/** The layout's base font size, what 1em and 1rem come to. */
const layoutFontPx = 16;

/** Pixel number (px widths, paddings, gaps), clamped to something a layout can survive. */
export function pixels(value: unknown, max = 2000): number | undefined {
  if (typeof value !== 'number' || !Number.isFinite(value)) return undefined;
  return Math.max(0, Math.min(max, Math.round(value)));
}

function round(n: number): number {
  return Math.round(n * 1000) / 1000;
}

/** Human-readable rule for schema errors. */
export const styleRules = {
  color: 'a colour like #1a2b3c, rgb(...), hsl(...) or a colour name',
  length: 'a number of pixels or a string like "50%", "12px" or "1.5em"',
  lineHeight: 'a number or a CSS length',
  fontFamily: 'font names separated by commas (letters, digits, spaces, quotes, - and _)',
  fontWeight: 'normal, bold, bolder, lighter or 100 to 900',
  fontStyle: 'normal, italic or oblique',
  textTransform: 'none, uppercase, lowercase or capitalize',
  textDecoration: 'none, underline, overline or line-through',
} as const;
