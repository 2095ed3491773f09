import { fontStack } from '../templates/fonts.js';
import {
  cssColor,
  cssFontFamily,
  cssFontWeight,
  cssKeyword,
  cssLength,
  cssLineHeight,
  pixels,
} from './style-values.js';
import type { BaseStyles } from './types.js';

/**
 * Node styles become inline `style` attributes (email clients drop or rewrite <style> blocks
 * inconsistently, inline styles survive everywhere). Only dark-mode and mobile overrides need selectors;
 * those become small generated classes with `!important` so they beat the inline values when the media
 * query matches.
 */
export type Decls = string[];

export function styleAttr(decls: Decls): string {
  return decls.length === 0 ? '' : ` style="${decls.join(';')}"`;
}

export function classAttr(...classes: (string | undefined | false)[]): string {
  const list = classes.filter(Boolean).join(' ');
  return list ? ` class="${list}"` : '';
}

/** Typography: fonts, colours and text treatment. */
export function textDecls(s: BaseStyles | undefined): Decls {
  if (!s) return [];
  const out: Decls = [];
  const family = cssFontFamily(s.fontFamily);
  if (family) out.push(`font-family:${fontStack(family)}`);
  push(out, 'font-size', cssLength(s.fontSize));
  push(out, 'font-weight', cssFontWeight(s.fontWeight));
  push(out, 'font-style', cssKeyword('fontStyle', s.fontStyle));
  push(out, 'line-height', cssLineHeight(s.lineHeight));
  push(out, 'letter-spacing', cssLength(s.letterSpacing));
  push(out, 'color', cssColor(s.color));
  push(out, 'text-transform', cssKeyword('textTransform', s.textTransform));
  push(out, 'text-decoration', cssKeyword('textDecoration', s.textDecoration));
  return out;
}

/** Background, border and padding of the node's own box. */
export function boxDecls(s: BaseStyles | undefined, defaultBorder = '#e5e7eb'): Decls {
  if (!s) return [];
  const out: Decls = [];
  push(out, 'background-color', cssColor(s.backgroundColor));
  out.push(...borderDecls(s, defaultBorder));
  push(out, 'border-radius', cssLength(s.borderRadius));
  out.push(...paddingDecls(s));
  return out;
}

export function borderDecls(s: BaseStyles, defaultBorder: string): Decls {
  const width = pixels(s.borderWidth, 50);
  const color = cssColor(s.borderColor);
  if (width !== undefined) return [`border:${width}px solid ${color ?? defaultBorder}`];
  return color ? [`border-color:${color}`] : [];
}

export function paddingDecls(s: BaseStyles): Decls {
  const out: Decls = [];
  push(out, 'padding-top', px(s.paddingTop));
  push(out, 'padding-right', px(s.paddingRight));
  push(out, 'padding-bottom', px(s.paddingBottom));
  push(out, 'padding-left', px(s.paddingLeft));
  return out;
}

export function linkDecls(s: BaseStyles | undefined): Decls {
  if (!s) return [];
  const out: Decls = [];
  push(out, 'color', cssColor(s.linkColor));
  push(out, 'text-decoration', cssKeyword('textDecoration', s.linkTextDecoration));
  return out;
}

/** The row around every node: spacing below it and horizontal alignment. */
export function outerDecls(s: BaseStyles | undefined): Decls {
  if (!s) return [];
  const out: Decls = [];
  push(out, 'padding-bottom', px(s.marginBottom));
  if (s.align === 'left' || s.align === 'center' || s.align === 'right') out.push(`text-align:${s.align}`);
  return out;
}

export function px(value: unknown): string | undefined {
  const n = pixels(value);
  return n === undefined ? undefined : `${n}px`;
}

function push(out: Decls, prop: string, value: string | undefined): void {
  if (value !== undefined) out.push(`${prop}:${value}`);
}

export function important(decls: Decls): string {
  return decls.map((d) => `${d}!important`).join(';');
}

/** One selector suffix (`''` for the element itself, `' a'` for its links) and its declarations. */
export interface OverrideRule {
  suffix: string;
  decls: Decls;
}

/**
 * Collects override classes for one render. Identical overrides share a class, so a repeated node (or
 * many nodes with the same dark colour) adds one rule, not one per occurrence.
 */
export class CssRegistry {
  private readonly classes = new Map<string, string>();
  private readonly darkRules: string[] = [];
  private readonly mobileRules: string[] = [];

  add(kind: 'dark' | 'mobile', rules: OverrideRule[]): string | undefined {
    const live = rules.filter((r) => r.decls.length > 0);
    if (live.length === 0) return undefined;
    const key = `${kind}|${live.map((r) => `${r.suffix}{${r.decls.join(';')}}`).join('')}`;
    const existing = this.classes.get(key);
    if (existing) return existing;
    const name = `${kind === 'dark' ? 'd' : 'm'}${this.classes.size + 1}`;
    this.classes.set(key, name);
    const target = kind === 'dark' ? this.darkRules : this.mobileRules;
    for (const rule of live) target.push(`.${name}${rule.suffix}{${important(rule.decls)}}`);
    return name;
  }

  get dark(): readonly string[] {
    return this.darkRules;
  }

  get mobile(): readonly string[] {
    return this.mobileRules;
  }
}

/**
 * How the words of a table cell (`text`, as shown) may break. A cell of short words keeps them whole
 * ("$161.70", "Amount"): breaking anywhere, as the card allows, let a table shrink its number columns below
 * their words on a phone or at 200 % text, which split "$161.7" from its "0". A cell with a long word (a
 * URL, a code) may still break it anywhere, or the table would push the email wider than the screen.
 */
export function cellWrapping(text: string): string {
  const longest = Math.max(0, ...text.split(/\s+/).map((word) => word.length));
  return longest <= 16 ? 'word-break:normal;overflow-wrap:break-word' : 'word-break:break-word';
}
