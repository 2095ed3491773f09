import { decodeXML } from 'entities';

/**
 * Whether an SVG logo is inert: drawn in the email as an <img> (where an SVG never runs script nor
 * fetches), it also travels as an image/svg+xml part that a mail client may open on its own, as a
 * document: there it must run nothing and load nothing. The check is an allowlist over the whole
 * document, read as an XML parser reads it: a searched-for `<script` or `javascript:` missed
 * `<s:script>` (any prefix bound to the SVG or XHTML namespace), `jav&#x61;script:` (character
 * references are decoded in attribute values), and every remote reference (`<image href=http…>`,
 * `<use href>` to another document, CSS `url()` and `@import`). Anything it cannot read is refused.
 *
 * - Elements: the SVG drawing elements below, unprefixed (the SVG namespace is only ever the default
 *   one); prefixed elements only in the editors' metadata namespaces, which no renderer runs.
 * - Attributes: no event handler (`on…`); every href is a fragment (`#id`), or an embedded raster
 *   image on <image>; every CSS `url()` is a fragment; no CSS escapes, `@import` or `image-set`.
 * - No DOCTYPE internal subset (entities), no processing instruction but the XML declaration.
 */
export function isInertSvg(text: string): boolean {
  const reader = new Reader(text.replace(/^\uFEFF/, ''));
  reader.skipProlog();
  let depth = 0;
  let seenRoot = false;
  let styleDepth = -1;
  while (!reader.done()) {
    if (reader.skip(comment)) continue;
    const cdata = reader.take(cdataSection);
    if (cdata) {
      if (styleDepth >= 0 && !isInertCss(cdata[1]!)) return false;
      continue;
    }
    const close = reader.take(closeTag);
    if (close) {
      depth--;
      if (depth < styleDepth) styleDepth = -1;
      if (depth < 0) return false;
      continue;
    }
    const open = reader.take(openTag);
    if (open) {
      const [, name, attributes, selfClosing] = open;
      if (depth === 0 && (seenRoot || name !== 'svg')) return false;
      seenRoot = true;
      if (!isAllowedElement(name!) || !attributesAreInert(name!, attributes!)) return false;
      if (!selfClosing) {
        if (name === 'style' && styleDepth < 0) styleDepth = depth;
        depth++;
      }
      continue;
    }
    const chars = reader.take(characters);
    if (!chars) return false; // a `<` that starts nothing above: a PI, a DOCTYPE in the body, a malformed tag
    if (!hasOnlyKnownReferences(chars[0])) return false;
    if (depth === 0 && chars[0].trim() !== '') return false;
    if (styleDepth >= 0 && !isInertCss(decodeXML(chars[0]))) return false;
  }
  return seenRoot && depth === 0;
}

/** The elements a logo draws with. No script, foreignObject, animation (<set>/<animate> can rewrite an href) or HTML. */
const svgElements = new Set(
  (
    'svg g defs symbol use path rect circle ellipse line polyline polygon text tspan textPath title desc metadata switch a image ' +
    'style linearGradient radialGradient stop pattern clipPath mask marker filter view'
  ).split(' '),
);

/** Namespaces of design tools' metadata (Inkscape, Sodipodi, Illustrator, Sketch, Serif, RDF/Dublin Core): nothing renders them. */
const metadataNamespaces = new Set([
  'http://www.w3.org/1999/xlink',
  'http://www.w3.org/XML/1998/namespace',
  'http://www.inkscape.org/namespaces/inkscape',
  'http://sodipodi.sourceforge.net/DTD/sodipodi-0.dtd',
  'http://www.w3.org/1999/02/22-rdf-syntax-ns#',
  'http://purl.org/dc/elements/1.1/',
  'http://creativecommons.org/ns#',
  'http://web.resource.org/cc/',
  'http://ns.adobe.com/AdobeIllustrator/10.0/',
  'http://ns.adobe.com/Extensibility/1.0/',
  'http://ns.adobe.com/Graphs/1.0/',
  'http://ns.adobe.com/SaveForWeb/1.0/',
  'http://ns.adobe.com/Variables/1.0/',
  'http://ns.adobe.com/ImageReplacement/1.0/',
  'http://ns.adobe.com/GenericCustomNamespace/1.0/',
  'http://ns.adobe.com/XPath/1.0/',
  'http://www.bohemiancoding.com/sketch/ns',
  'http://www.serif.com/',
]);

const svgNamespace = 'http://www.w3.org/2000/svg';

function isAllowedElement(name: string): boolean {
  // A prefixed element is in a namespace its xmlns:prefix binds, and that binding must be a metadata one
  // (attributesAreInert refuses any other): so the prefix alone cannot make it SVG or HTML.
  if (name.includes(':')) return true;
  return svgElements.has(name) || /^fe[A-Z][A-Za-z]*$/.test(name);
}

function attributesAreInert(element: string, attributes: string): boolean {
  for (const [, name, quoted] of attributes.matchAll(/([A-Za-z_][\w.:-]*)\s*=\s*("[^"]*"|'[^']*')/g)) {
    const raw = quoted!.slice(1, -1);
    if (!hasOnlyKnownReferences(raw)) return false;
    const value = decodeXML(raw);
    const local = name!.slice(name!.indexOf(':') + 1).toLowerCase();
    // Event handlers; xml:base, which would make a `#fragment` resolve in another document.
    if (local.startsWith('on') || name === 'xml:base') return false;
    if (name === 'xmlns') {
      if (value !== svgNamespace) return false;
    } else if (name!.startsWith('xmlns:')) {
      if (!metadataNamespaces.has(value)) return false;
    } else if (local === 'href' || local === 'src') {
      if (!value.startsWith('#') && !(element === 'image' && /^data:image\/(?:png|jpeg|gif|webp);base64,/i.test(value))) return false;
    } else if (!isInertCss(value)) {
      return false; // style, fill, clip-path…: any presentation attribute may hold url()
    }
  }
  return true;
}

/** CSS that loads nothing: every url() is a fragment; no escapes (`u\72l(`), no @import, no image-set(). */
function isInertCss(css: string): boolean {
  if (/\\|@import|image-set/i.test(css)) return false;
  for (const [, target] of css.matchAll(/url\(\s*['"]?([^)]*)/gi)) if (!target!.startsWith('#')) return false;
  return true;
}

/** Character references and XML's five predefined entities only: an entity from a DTD could expand to markup. */
function hasOnlyKnownReferences(text: string): boolean {
  return !/&(?!(?:amp|lt|gt|quot|apos|#\d{1,7}|#x[0-9a-fA-F]{1,6});)/.test(text);
}

// Sticky (`y`): each matches where the reader stands, without copying the rest of a 500 kB file per token.
const comment = /<!--(?:(?!--)[\s\S])*-->/y;
const cdataSection = /<!\[CDATA\[([\s\S]*?)\]\]>/y;
const closeTag = /<\/([A-Za-z_][\w.:-]*)\s*>/y;
const openTag = /<([A-Za-z_][\w.:-]*)((?:\s+[A-Za-z_][\w.:-]*\s*=\s*(?:"[^"<]*"|'[^'<]*'))*)\s*(\/?)>/y;
const characters = /[^<]+/y;

class Reader {
  private at = 0;
  constructor(private readonly text: string) {}

  done(): boolean {
    return this.at >= this.text.length;
  }

  take(pattern: RegExp): RegExpExecArray | null {
    pattern.lastIndex = this.at;
    const match = pattern.exec(this.text);
    if (match) this.at = pattern.lastIndex;
    return match;
  }

  skip(pattern: RegExp): boolean {
    return this.take(pattern) !== null;
  }

  /** The XML declaration, comments, whitespace and a DOCTYPE without internal subset (no entities). */
  skipProlog(): void {
    this.skip(/\s*<\?xml\s[^?]*\?>/y);
    while (this.skip(/\s+/y) || this.skip(comment) || this.skip(/<!DOCTYPE\s[^[\]<>]*>/y));
  }
}
