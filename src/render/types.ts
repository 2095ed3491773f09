/**
 * Public types of the rendering engine. Content nodes follow the API spec §2.2; everything here is plain
 * data so templates can be stored as JSON and rendered anywhere.
 */

/** `emailTemplateDesign` of a project (PATCH /v1/project, COMPAT.md "Templates and rendering"). */
export interface ProjectDesign {
  logo?: {
    sizeWidth?: number;
    href?: string | null;
    /** Base64 image, with or without a `data:image/...;base64,` prefix. */
    file?: string | null;
    url?: string | null;
  } | null;
  font?: { name?: string } | null;
  colors?: { highlight?: string; isDarkModeEnabled?: boolean } | null;
  /** Extension: a BCP 47 tag, the html's `lang` (projects/schemas.ts). */
  language?: string | null;
  unsubscribeText?: string | null;
  footerTextTransactional?: string | null;
}

/** Strings, arrays of non-negative numbers, arrays of objects (spec §2.1 sampleProps). */
export type TemplateProps = Record<string, unknown>;

export interface InlineImage {
  cid: string;
  filename: string;
  contentType: string;
  content: Buffer;
}

export interface RenderedEmail {
  subject: string;
  html: string;
  text: string;
  inlineImages: InlineImage[];
}

export interface RenderOptions {
  /** `cid` for sending (default): images become inline attachments. `data-uri` for previews in browsers. */
  imageMode?: 'cid' | 'data-uri';
  /**
   * A broadcast (Messenger): its footer adds the design's `unsubscribeText`, with the recipient's link.
   * Transactional mail (a receipt, a password reset) has `footerTextTransactional` alone: the text's
   * `{unsubscribeUrl}` went nowhere there, under an offer to unsubscribe from mail nobody subscribed to.
   */
  broadcast?: boolean;
  /** Wall time the render may take (budget.ts: 2 s); tests that count nodes on a loaded machine allow more. */
  timeLimitMs?: number;
}

export interface TemplateInput {
  subject: string;
  content: ContentNode[];
  preheader?: string | null;
  emailText?: string | null;
  layoutId?: string | null;
}

export type Align = 'left' | 'center' | 'right';

/** Style fields that can be overridden in dark mode or on small screens. */
export interface BaseStyles {
  marginBottom?: number;
  align?: Align;
  width?: number | string;
  height?: number | string;
  fontFamily?: string;
  fontSize?: number | string;
  fontWeight?: number | string;
  fontStyle?: string;
  lineHeight?: number | string;
  letterSpacing?: number | string;
  color?: string;
  textTransform?: string;
  textDecoration?: string;
  linkColor?: string;
  linkTextDecoration?: string;
  backgroundColor?: string;
  borderWidth?: number;
  borderColor?: string;
  borderRadius?: number | string;
  paddingTop?: number;
  paddingBottom?: number;
  paddingLeft?: number;
  paddingRight?: number;
  /** box only: pixels between columns. */
  gap?: number;
  /** box only. */
  verticalAlign?: 'top' | 'middle' | 'bottom';
}

export interface NodeStyles extends BaseStyles {
  /** Applied only when the project design enables dark mode. */
  dark?: BaseStyles;
  /** Applied on small screens; `stackColumns` is for boxes. */
  mobile?: BaseStyles & { stackColumns?: boolean };
}

interface NodeBase {
  id?: string;
  styles?: NodeStyles;
  iterationKey?: string;
}

export interface TextNode extends NodeBase {
  type: 'text';
  text: string;
  preset?: string;
}

export interface ButtonNode extends NodeBase {
  type: 'button';
  label: string;
  url: string;
  preset?: string;
}

export interface ListNode extends NodeBase {
  type: 'list';
  items: string[];
  symbol?: string;
  preset?: string;
}

export interface TableColumn {
  label: string;
  align?: Align;
}

export interface TableCell {
  text: string;
}

export interface TableNode extends NodeBase {
  type: 'table';
  columns: TableColumn[];
  rows: TableCell[][];
  iterationTarget?: 'children';
}

export interface DividerNode extends NodeBase {
  type: 'divider';
}

export interface ImageNode extends NodeBase {
  type: 'image';
  src: string;
  darkModeSrc?: string;
  alt?: string;
  href?: string | null;
}

export interface ChartNode extends NodeBase {
  type: 'chart';
  dataKey: string;
  chartType: 'line' | 'bar';
  curve?: 'monotone' | 'linear';
  fill?: boolean;
  maxValue?: number;
  xAxisStartLabel?: string;
  xAxisEndLabel?: string;
}

export const codeLanguages = ['text', 'javascript', 'php', 'ruby', 'python', 'bash'] as const;
export type CodeLanguage = (typeof codeLanguages)[number];

export interface CodeNode extends NodeBase {
  type: 'code';
  code: string;
  language: CodeLanguage;
}

export interface BoxColumn {
  width?: number | string;
  elements: ContentNode[];
}

export interface BoxNode extends NodeBase {
  type: 'box';
  columns: BoxColumn[];
}

export type ContentNode =
  | TextNode
  | ButtonNode
  | ListNode
  | TableNode
  | DividerNode
  | ImageNode
  | ChartNode
  | CodeNode
  | BoxNode;

export type NodeType = ContentNode['type'];

/**
 * The Content-ID of an inline image the renderer adds (the project logo, a chart), as opposed to one the
 * sender's own message carried (SMTP submission): `<kind>-<hash>@postino`.
 */
export function generatedContentId(kind: 'logo' | 'chart', hash: string): string {
  return `${kind}-${hash}@postino`;
}

export const isGeneratedContentId = (contentId: string): boolean => contentId.endsWith('@postino');
