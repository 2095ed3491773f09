/**
 * CSS value rules shared by the content schema (reject at save time) and the renderer (drop at render
 * time). Style values land inside `style="..."` attributes and `<style>` blocks, so anything that could
 * close a declaration (`;`, `}`), open a URL (`url(`) or smuggle markup is refused by construction: each
 * value must match a narrow pattern, not merely "look safe".
 */

const hexColor = /^#(?:[0-9a-f]{3,4}|[0-9a-f]{6}|[0-9a-f]{8})$/i;
const opaqueHex = /^#(?:[0-9a-f]{3}|[0-9a-f]{6})$/i;
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

/**
 * A colour as mail clients read it: hex, or `rgba(r, g, b, a)` with commas when it is translucent; a name
 * as given. Gmail deletes a whole `style` attribute, or the whole `<style>` block, holding `rgb()` in the
 * CSS Color 4 space syntax (`rgb(17 24 39)`, what devtools and Tailwind write; caniemail css-rgb), and a
 * `bgcolor` attribute reads any function as some other colour; hex is read alike everywhere, and
 * Outlook for Windows does not read an alpha digit pair (`#11182780`).
 */
export function cssColor(value: unknown): string | undefined {
  const v = shortValue(value);
  if (v === undefined) return undefined;
  if (namedColor.test(v) || opaqueHex.test(v)) return v;
  const channels = hexColor.test(v) ? hexChannels(v) : fnColor.test(v) ? functionChannels(v) : undefined;
  return channels && clientColor(channels);
}

/** Red, green and blue in 0–255 and alpha in 0–1. */
type Channels = [number, number, number, number];

function hexChannels(hex: string): Channels {
  const digits = hex.slice(1);
  const pairs = digits.length <= 4 ? [...digits].map((d) => d + d) : digits.match(/../g)!;
  const [r, g, b, a = 255] = pairs.map((pair) => parseInt(pair, 16));
  return [r!, g!, b!, a / 255];
}

/** `rgb()`, `rgba()`, `hsl()` or `hsla()` in either syntax (commas, or spaces with `/ alpha`); values out of range are clamped, as CSS does. */
function functionChannels(value: string): Channels {
  const [name, ...args] = value.toLowerCase().match(/[a-z]+|[0-9.]+%?/g)!;
  const number = (arg: string | undefined, percentOf: number) => (arg === undefined ? NaN : arg.endsWith('%') ? (parseFloat(arg) / 100) * percentOf : parseFloat(arg));
  const alpha = args[3] === undefined ? 1 : clamp(number(args[3], 1), 0, 1);
  if (name!.startsWith('rgb')) {
    const [r, g, b] = args.slice(0, 3).map((arg) => clamp(number(arg, 255), 0, 255));
    return [r!, g!, b!, alpha];
  }
  const [h, s, l] = [number(args[0], 360), clamp(number(args[1], 100), 0, 100) / 100, clamp(number(args[2], 100), 0, 100) / 100];
  return [...hslToRgb(h, s, l), alpha];
}

/** CSS Color 4's hsl-to-rgb. */
function hslToRgb(hue: number, saturation: number, lightness: number): [number, number, number] {
  const h = (((hue % 360) + 360) % 360) / 30;
  const a = saturation * Math.min(lightness, 1 - lightness);
  const channel = (n: number) => {
    const k = (n + h) % 12;
    return 255 * (lightness - a * Math.max(-1, Math.min(k - 3, 9 - k, 1)));
  };
  return [channel(0), channel(8), channel(4)];
}

function clientColor([r, g, b, alpha]: Channels): string {
  const [red, green, blue] = [r, g, b].map((c) => Math.round(Number.isFinite(c) ? c : 0));
  if (alpha >= 1 || !Number.isFinite(alpha)) return `#${[red, green, blue].map((c) => c!.toString(16).padStart(2, '0')).join('')}`;
  return `rgba(${red}, ${green}, ${blue}, ${round(alpha)})`;
}

const clamp = (value: number, min: number, max: number) => Math.min(max, Math.max(min, value));

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
