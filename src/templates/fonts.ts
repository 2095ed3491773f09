/**
 * Fonts offered to the template editor (spec §2.4 `{name, category, variants, subsets}`, served by
 * `GET /v1/templates/fonts`) and the fallback stacks the renderer uses for them. Web fonts load only in
 * clients that support `<link>` web fonts (Apple Mail, iOS, some Android clients); everywhere else the
 * stack falls back to a similar installed face, so every entry carries a stack chosen for its shape, not
 * just its generic family.
 */

export interface Font {
  name: string;
  category: 'sans-serif' | 'serif' | 'monospace' | 'display' | 'handwriting';
  variants: string[];
  subsets: string[];
}

interface FontEntry extends Font {
  /** Installed faces to fall back to, ending in a generic family. */
  fallback: string;
  /** Loaded from Google Fonts when used; false for web-safe system fonts. */
  webFont: boolean;
}

const systemSans = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif";
const humanistSans = "'Segoe UI', Tahoma, Geneva, Verdana, sans-serif";
const geometricSans = "'Century Gothic', 'Avenir Next', Avenir, 'Segoe UI', Helvetica, Arial, sans-serif";
const oldStyleSerif = "Georgia, 'Times New Roman', Times, serif";
const transitionalSerif = "'Iowan Old Style', 'Palatino Linotype', Palatino, Georgia, serif";
const mono = "SFMono-Regular, Menlo, Consolas, 'Liberation Mono', 'Courier New', monospace";

const latin = ['latin', 'latin-ext'];
const wide = ['latin', 'latin-ext', 'cyrillic', 'cyrillic-ext', 'greek', 'greek-ext', 'vietnamese'];
const weights = (...w: number[]) => w.flatMap((n) => [String(n), `${n}italic`]);
const upright = (...w: number[]) => w.map(String);

const entries: FontEntry[] = [
  // Web-safe: installed nearly everywhere, no download.
  { name: 'System', category: 'sans-serif', variants: upright(400, 700), subsets: wide, fallback: systemSans, webFont: false },
  { name: 'Arial', category: 'sans-serif', variants: weights(400, 700), subsets: wide, fallback: "Arial, 'Helvetica Neue', Helvetica, sans-serif", webFont: false },
  { name: 'Helvetica', category: 'sans-serif', variants: weights(400, 700), subsets: wide, fallback: "'Helvetica Neue', Helvetica, Arial, sans-serif", webFont: false },
  { name: 'Verdana', category: 'sans-serif', variants: weights(400, 700), subsets: wide, fallback: 'Verdana, Geneva, Tahoma, sans-serif', webFont: false },
  { name: 'Tahoma', category: 'sans-serif', variants: upright(400, 700), subsets: wide, fallback: 'Tahoma, Verdana, Geneva, sans-serif', webFont: false },
  { name: 'Trebuchet MS', category: 'sans-serif', variants: weights(400, 700), subsets: wide, fallback: "'Trebuchet MS', 'Lucida Grande', 'Lucida Sans Unicode', Tahoma, sans-serif", webFont: false },
  { name: 'Georgia', category: 'serif', variants: weights(400, 700), subsets: wide, fallback: "Georgia, 'Times New Roman', Times, serif", webFont: false },
  { name: 'Times New Roman', category: 'serif', variants: weights(400, 700), subsets: wide, fallback: "'Times New Roman', Times, Georgia, serif", webFont: false },
  { name: 'Palatino', category: 'serif', variants: weights(400, 700), subsets: latin, fallback: "'Palatino Linotype', Palatino, 'Book Antiqua', Georgia, serif", webFont: false },
  { name: 'Courier New', category: 'monospace', variants: weights(400, 700), subsets: wide, fallback: "'Courier New', Courier, monospace", webFont: false },
  // Curated web fonts with fallbacks of a similar shape.
  { name: 'Inter', category: 'sans-serif', variants: upright(400, 500, 600, 700), subsets: wide, fallback: systemSans, webFont: true },
  { name: 'Roboto', category: 'sans-serif', variants: weights(400, 500, 700), subsets: wide, fallback: systemSans, webFont: true },
  { name: 'Open Sans', category: 'sans-serif', variants: weights(400, 600, 700), subsets: wide, fallback: humanistSans, webFont: true },
  { name: 'Lato', category: 'sans-serif', variants: weights(400, 700), subsets: latin, fallback: humanistSans, webFont: true },
  { name: 'Source Sans 3', category: 'sans-serif', variants: weights(400, 600, 700), subsets: wide, fallback: humanistSans, webFont: true },
  { name: 'Noto Sans', category: 'sans-serif', variants: weights(400, 600, 700), subsets: wide, fallback: humanistSans, webFont: true },
  { name: 'Nunito', category: 'sans-serif', variants: weights(400, 600, 700), subsets: wide, fallback: "'Segoe UI', 'Helvetica Rounded', Arial, sans-serif", webFont: true },
  { name: 'Work Sans', category: 'sans-serif', variants: weights(400, 500, 600), subsets: ['latin', 'latin-ext', 'vietnamese'], fallback: systemSans, webFont: true },
  { name: 'DM Sans', category: 'sans-serif', variants: weights(400, 500, 700), subsets: latin, fallback: geometricSans, webFont: true },
  { name: 'IBM Plex Sans', category: 'sans-serif', variants: weights(400, 500, 600), subsets: ['latin', 'latin-ext', 'cyrillic', 'greek', 'vietnamese'], fallback: systemSans, webFont: true },
  { name: 'Montserrat', category: 'sans-serif', variants: weights(400, 500, 600, 700), subsets: wide, fallback: geometricSans, webFont: true },
  { name: 'Poppins', category: 'sans-serif', variants: weights(400, 500, 600, 700), subsets: ['latin', 'latin-ext', 'devanagari'], fallback: geometricSans, webFont: true },
  { name: 'Raleway', category: 'sans-serif', variants: weights(400, 500, 600, 700), subsets: wide, fallback: geometricSans, webFont: true },
  { name: 'Merriweather', category: 'serif', variants: weights(400, 700), subsets: wide, fallback: oldStyleSerif, webFont: true },
  { name: 'Lora', category: 'serif', variants: weights(400, 500, 600, 700), subsets: wide, fallback: oldStyleSerif, webFont: true },
  { name: 'PT Serif', category: 'serif', variants: weights(400, 700), subsets: ['latin', 'latin-ext', 'cyrillic', 'cyrillic-ext'], fallback: transitionalSerif, webFont: true },
  { name: 'Playfair Display', category: 'serif', variants: weights(400, 600, 700), subsets: ['latin', 'latin-ext', 'cyrillic', 'vietnamese'], fallback: transitionalSerif, webFont: true },
  { name: 'Libre Baskerville', category: 'serif', variants: ['400', '400italic', '700'], subsets: latin, fallback: "Baskerville, 'Baskerville Old Face', Georgia, serif", webFont: true },
  { name: 'Roboto Mono', category: 'monospace', variants: weights(400, 500, 700), subsets: wide, fallback: mono, webFont: true },
  { name: 'Source Code Pro', category: 'monospace', variants: weights(400, 500, 700), subsets: wide, fallback: mono, webFont: true },
  { name: 'JetBrains Mono', category: 'monospace', variants: weights(400, 500, 700), subsets: wide, fallback: mono, webFont: true },
];

const byName = new Map(entries.map((e) => [e.name.toLowerCase(), e]));

/** The public list (spec §2.4 shape only). */
export const fonts: Font[] = entries.map(({ name, category, variants, subsets }) => ({ name, category, variants, subsets }));

export const monospaceFontStack = mono;

/**
 * CSS `font-family` value for a font name: the named face first (quoted when needed), then its curated
 * fallback. Unknown names are kept first, followed by the system stack, so a font the recipient happens to
 * have still wins. A value that already lists several families is returned as written.
 */
export function fontStack(name: string | null | undefined): string {
  const trimmed = (name ?? '').trim();
  if (trimmed === '' || trimmed.toLowerCase() === 'system' || trimmed.toLowerCase() === 'default') return systemSans;
  if (trimmed.includes(',')) return familyList(trimmed) || systemSans;
  const entry = byName.get(trimmed.toLowerCase());
  const quoted = quoteFamily(trimmed);
  if (!entry) return `${quoted}, ${systemSans}`;
  return entry.fallback.toLowerCase().startsWith(quoted.toLowerCase()) ? entry.fallback : `${quoted}, ${entry.fallback}`;
}

/**
 * A family list as the user wrote it, rebuilt from safe parts: the stack goes into style attributes and
 * a <style> block, where a stray quote, `;`, `"` or `<` would end the declaration, the attribute or the
 * element. Each family keeps letters, digits, spaces, `-` and `_` only, and is quoted when it needs it.
 */
function familyList(text: string): string {
  return text
    .split(',')
    .map(quoteFamily)
    .filter((family) => family !== '' && family !== "''")
    .join(', ');
}

function quoteFamily(family: string): string {
  const plain = family.replace(/[^A-Za-z0-9 _-]/g, '').trim().replace(/\s+/g, ' ');
  return /^[A-Za-z-]+$/.test(plain) ? plain : `'${plain}'`;
}

/** Google Fonts stylesheet URL for a web font, or undefined for web-safe and unknown fonts. */
export function webFontUrl(name: string | null | undefined): string | undefined {
  const entry = byName.get((name ?? '').trim().toLowerCase());
  if (!entry?.webFont) return undefined;
  const wght = [...new Set(entry.variants.map((v) => parseInt(v, 10)))].filter((w) => w <= 700).sort((a, b) => a - b);
  return `https://fonts.googleapis.com/css2?family=${encodeURIComponent(entry.name).replace(/%20/g, '+')}:wght@${wght.join(';')}&display=swap`;
}
