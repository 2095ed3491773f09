import { fontStack, webFontUrl } from '../templates/fonts.js';
import { Lru } from './lru.js';
import { cssColor, pixels } from './style-values.js';
import type { ProjectDesign } from './types.js';

/** Body width of the layout (issue 3: 600 px) and the card's inner padding; content is what remains. */
export const bodyWidth = 600;
export const cardPadding = 40;
export const contentWidth = bodyWidth - 2 * cardPadding;
/** Below this viewport width the mobile rules apply. */
export const mobileBreakpoint = 620;

export interface Palette {
  page: string;
  card: string;
  text: string;
  title: string;
  muted: string;
  border: string;
  subtle: string;
  link: string;
}

export interface Theme {
  /** The design's brand colour as given: button backgrounds and borders, chart lines. */
  highlight: string;
  /** Text colour on highlight-coloured buttons, picked for contrast. */
  onHighlight: string;
  font: string;
  webFont?: string;
  darkEnabled: boolean;
  light: Palette;
  dark: Palette;
}

const defaultHighlight = '#4f46e5';

const themes = new Lru<string, Theme>(100);

/** Themes depend on three design fields only, so they are computed once per distinct combination. */
export function resolveTheme(design: ProjectDesign): Theme {
  const highlight = normaliseHex(cssColor(design.colors?.highlight)) ?? defaultHighlight;
  const fontName = design.font?.name ?? undefined;
  const darkEnabled = design.colors?.isDarkModeEnabled === true;
  return themes.getOrCreate(`${highlight}|${fontName ?? ''}|${darkEnabled}`, () => buildTheme(highlight, fontName, darkEnabled));
}

// Muted text reads on the grey page too (the footer, every broadcast's unsubscribe link), not only on the card.
const lightPalette: Omit<Palette, 'link'> = {
  page: '#f3f4f6', card: '#ffffff', text: '#374151', title: '#111827', muted: '#646b77', border: '#e5e7eb', subtle: '#f3f4f6',
};
const darkPalette: Omit<Palette, 'link'> = {
  page: '#0f1115', card: '#1b1e24', text: '#d1d5db', title: '#f9fafb', muted: '#9ca3af', border: '#2f343c', subtle: '#262a31',
};

function buildTheme(highlight: string, fontName: string | undefined, darkEnabled: boolean): Theme {
  return {
    highlight,
    onHighlight: readableOn(highlight),
    font: fontStack(fontName),
    webFont: webFontUrl(fontName),
    darkEnabled,
    // Text in the brand colour (links, outline labels, list markers) is shaded until it reads (WCAG AA)
    // on the card and on the light grey panels put on it (the darker of the two): an amber or sky-blue
    // brand gave 2.2–2.8:1 on white. In dark mode it is lifted until it reads on the dark card.
    light: { ...lightPalette, link: readableShade(highlight, lightPalette.subtle, '#000000') },
    dark: { ...darkPalette, link: liftedFor(highlight, darkPalette.card) },
  };
}

/** Logo width in pixels: the design's `sizeWidth`, kept inside the body. */
export function logoWidth(design: ProjectDesign): number {
  return pixels(design.logo?.sizeWidth, bodyWidth) || 120;
}

/**
 * Expands `#abc` and drops alpha so colour maths works, for translucent colours as cssColor writes them
 * (`rgba(r, g, b, a)`) too: measured by their channels, as an alpha pair was before; other colours are
 * returned unchanged.
 */
export function normaliseHex(color: string | undefined): string | undefined {
  if (!color) return undefined;
  const translucent = /^rgba\((\d{1,3}), (\d{1,3}), (\d{1,3}), [\d.]+\)$/.exec(color);
  if (translucent) return `#${translucent.slice(1, 4).map((c) => Number(c).toString(16).padStart(2, '0')).join('')}`;
  const short = /^#([0-9a-f])([0-9a-f])([0-9a-f])[0-9a-f]?$/i.exec(color);
  if (short) return `#${short[1]}${short[1]}${short[2]}${short[2]}${short[3]}${short[3]}`.toLowerCase();
  const long = /^#([0-9a-f]{6})(?:[0-9a-f]{2})?$/i.exec(color);
  return long ? `#${long[1]!.toLowerCase()}` : color;
}

/** `#rrggbb` → [r, g, b] in 0..255; anything else falls back to the default highlight. */
export function rgb(color: string): [number, number, number] {
  const hex = /^#([0-9a-f]{6})$/i.exec(normaliseHex(color) ?? '')?.[1] ?? defaultHighlight.slice(1);
  return [parseInt(hex.slice(0, 2), 16), parseInt(hex.slice(2, 4), 16), parseInt(hex.slice(4, 6), 16)];
}

/**
 * Dark or white text, whichever reads better on `background` (a hex colour). Not a luminance threshold:
 * between the point where both read alike (luminance ~0.2) and 0.45, white was chosen and failed 4.5:1.
 */
export function readableOn(background: string): '#111827' | '#ffffff' {
  return contrastRatio('#111827', background) > contrastRatio('#ffffff', background) ? '#111827' : '#ffffff';
}

/** A colour given as hex (#rgb, #rrggbb, with alpha or not) as `#rrggbb`; undefined for a name or a function, which cannot be measured. */
export function measurableHex(color: string | undefined): string | undefined {
  const hex = normaliseHex(color);
  return hex && /^#[0-9a-f]{6}$/.test(hex) ? hex : undefined;
}

/** `readableOn` for a colour given as hex; undefined for one that cannot be measured. */
export function readableOnHex(background: string | undefined): '#111827' | '#ffffff' | undefined {
  const hex = measurableHex(background);
  return hex ? readableOn(hex) : undefined;
}

/** WCAG 2 contrast ratio of two hex colours, 1 to 21. */
export function contrastRatio(a: string, b: string): number {
  const [light, dark] = [luminance(a), luminance(b)].sort((x, y) => y - x) as [number, number];
  return (light + 0.05) / (dark + 0.05);
}

/**
 * `color` mixed towards white until it reads on `background` (WCAG AA, 4.5:1), for text that keeps its
 * hue on a dark background; the colour itself when it reads already.
 */
export function liftedFor(color: string, background: string): string {
  return readableShade(color, background, '#ffffff');
}

/** `color` mixed towards `towards` (white or black) in tenths until it reads on `background` (4.5:1). */
function readableShade(color: string, background: string, towards: '#ffffff' | '#000000'): string {
  for (let amount = 0; amount <= 1; amount += 0.1) {
    const shaded = amount === 0 ? color : mix(color, towards, amount);
    if (contrastRatio(shaded, background) >= 4.5) return shaded;
  }
  return towards;
}

/** WCAG relative luminance. */
export function luminance(color: string): number {
  const [r, g, b] = rgb(color).map((c) => {
    const s = c / 255;
    return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  }) as [number, number, number];
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

export function mix(a: string, b: string, amount: number): string {
  const ca = rgb(a);
  const cb = rgb(b);
  const out = ca.map((c, i) => Math.round(c + (cb[i]! - c) * amount));
  return `#${out.map((c) => c.toString(16).padStart(2, '0')).join('')}`;
}
