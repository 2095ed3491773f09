import { z } from 'zod';
import { safeUrl, type UrlKind } from './escape.js';
import { isCodeLanguage, codeLanguage } from './highlight.js';
import {
  cssColor,
  cssFontFamily,
  cssFontWeight,
  cssKeyword,
  cssLength,
  cssLineHeight,
  styleRules,
} from './style-values.js';

/**
 * The content node schema (spec §2.2). Objects are loose: fields this version does not know are kept,
 * so content written by a newer editor survives a round trip. Known fields are checked strictly enough
 * that nothing stored can break the markup: colours and lengths match CSS patterns, URLs use allowed
 * schemes (or contain a `{variable}` that is checked at render time).
 */

const limits = { text: 100_000, short: 200, url: 4_000, items: 500, columns: 6, rows: 500, nodes: 2_000 };

const ruled = <T extends z.ZodType>(schema: T, test: (v: z.infer<T>) => boolean, message: string) =>
  schema.refine(test, { message: `must be ${message}` });

const color = ruled(z.string(), (v) => cssColor(v) !== undefined, styleRules.color);
const length = ruled(z.union([z.number(), z.string()]), (v) => cssLength(v) !== undefined, styleRules.length);
const px = z.number().min(0).max(2000);

const baseStyleShape = {
  marginBottom: px.nullish(),
  align: z.enum(['left', 'center', 'right']).nullish(),
  width: length.nullish(),
  height: length.nullish(),
  fontFamily: ruled(z.string(), (v) => cssFontFamily(v) !== undefined, styleRules.fontFamily).nullish(),
  fontSize: length.nullish(),
  fontWeight: ruled(z.union([z.number(), z.string()]), (v) => cssFontWeight(v) !== undefined, styleRules.fontWeight).nullish(),
  fontStyle: ruled(z.string(), (v) => cssKeyword('fontStyle', v) !== undefined, styleRules.fontStyle).nullish(),
  lineHeight: ruled(z.union([z.number(), z.string()]), (v) => cssLineHeight(v) !== undefined, styleRules.lineHeight).nullish(),
  letterSpacing: length.nullish(),
  color: color.nullish(),
  textTransform: ruled(z.string(), (v) => cssKeyword('textTransform', v) !== undefined, styleRules.textTransform).nullish(),
  textDecoration: ruled(z.string(), (v) => cssKeyword('textDecoration', v) !== undefined, styleRules.textDecoration).nullish(),
  linkColor: color.nullish(),
  linkTextDecoration: ruled(z.string(), (v) => cssKeyword('textDecoration', v) !== undefined, styleRules.textDecoration).nullish(),
  backgroundColor: color.nullish(),
  borderWidth: z.number().min(0).max(50).nullish(),
  borderColor: color.nullish(),
  borderRadius: length.nullish(),
  paddingTop: px.nullish(),
  paddingBottom: px.nullish(),
  paddingLeft: px.nullish(),
  paddingRight: px.nullish(),
  gap: z.number().min(0).max(200).nullish(),
  verticalAlign: z.enum(['top', 'middle', 'bottom']).nullish(),
};

const baseStyles = z.looseObject(baseStyleShape);
const styles = z.looseObject({
  ...baseStyleShape,
  dark: baseStyles.nullish(),
  mobile: z.looseObject({ ...baseStyleShape, stackColumns: z.boolean().nullish() }).nullish(),
});

/** A URL field: empty, or a URL with an allowed scheme, or a template whose literal prefix is safe. */
function url(kind: UrlKind) {
  const allowed = kind === 'image' ? 'an http(s) or cid: image URL' : 'an http(s), mailto: or tel: URL';
  return ruled(z.string().max(limits.url), (v) => urlAllowed(v, kind), `${allowed} or contain a {variable}`);
}

export function urlAllowed(value: string, kind: UrlKind): boolean {
  const v = value.trim();
  if (v === '') return true;
  const brace = v.search(/\{[^{}\r\n]{1,100}\}/);
  if (brace === -1) return safeUrl(v, kind) !== undefined;
  // `{url}` or `https://x/{path}` are checked after substitution; `javascript:{x}` is refused now.
  const prefix = v.slice(0, brace);
  return !/^[\s\u0000-\u001f]*[a-z][a-z0-9+.-]*:/i.test(prefix) || safeUrl(`${prefix}x`, kind) !== undefined;
}

const common = {
  id: z.string().max(100).nullish(),
  styles: styles.nullish(),
  iterationKey: z.string().min(1).max(limits.short).nullish(),
};

const preset = z.string().max(50).nullish();
const text = z.string().max(limits.text);
const shortText = z.string().max(limits.short * 5);

export const nodeSchema: z.ZodType = z.lazy(() =>
  z.discriminatedUnion('type', [
    z.looseObject({ ...common, type: z.literal('text'), text, preset }),
    z.looseObject({ ...common, type: z.literal('button'), label: shortText, url: url('link'), preset }),
    z.looseObject({ ...common, type: z.literal('list'), items: z.array(text).max(limits.items), symbol: z.string().max(8).nullish(), preset }),
    z.looseObject({
      ...common,
      type: z.literal('table'),
      columns: z.array(z.looseObject({ label: shortText, align: z.enum(['left', 'center', 'right']).nullish() })).max(20),
      rows: z.array(z.array(z.looseObject({ text })).max(20)).max(limits.rows),
      iterationTarget: z.literal('children').nullish(),
    }),
    z.looseObject({ ...common, type: z.literal('divider') }),
    z.looseObject({
      ...common,
      type: z.literal('image'),
      src: url('image'),
      darkModeSrc: url('image').nullish(),
      alt: shortText.nullish(),
      href: url('link').nullish(),
    }),
    z.looseObject({
      ...common,
      type: z.literal('chart'),
      dataKey: z.string().min(1).max(limits.short),
      chartType: z.enum(['line', 'bar']),
      curve: z.enum(['monotone', 'linear']).nullish(),
      fill: z.boolean().nullish(),
      maxValue: z.number().positive().finite().nullish(),
      xAxisStartLabel: shortText.nullish(),
      xAxisEndLabel: shortText.nullish(),
    }),
    z.looseObject({
      ...common,
      type: z.literal('code'),
      code: text,
      language: ruled(z.string(), isCodeLanguage, 'one of text, javascript, php, ruby, python, bash').transform(codeLanguage),
    }),
    z.looseObject({
      ...common,
      type: z.literal('box'),
      columns: z
        .array(
          z.looseObject({
            // Trimmed first: `\s*(px|%)?\s*$` on a long run of spaces took time growing with its square.
            width: z.union([z.number().positive().max(2000), ruled(z.string(), (v) => v.length <= 64 && /^\d{1,4}(\.\d+)?\s*(px|%)?$/.test(v.trim()), 'a number of pixels or a percentage like "50%"')]).nullish(),
            elements: z.array(nodeSchema).max(limits.nodes),
          }),
        )
        .min(1)
        .max(limits.columns),
    }),
  ]),
);

export const contentSchema = z.array(nodeSchema).max(limits.nodes);

/** Nodes of one content in all, the elements of nested boxes included (each list alone has the same cap). */
export const maxContentNodes = limits.nodes;
