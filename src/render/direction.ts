/**
 * Which way an email's text runs. Arabic, Hebrew and the other right-to-left scripts need the layout
 * itself right-to-left (RFC-less but universal: `dir="rtl"` on the document, text aligned right, table
 * columns from the right): in the left-to-right layout their sentences ended with the full stop at the
 * start of the line and sat against the wrong edge. Decided as browsers decide `dir="auto"`: by the
 * first letter that has a direction.
 */
export type TextDirection = 'ltr' | 'rtl';

const firstLetter = /\p{L}/u;
const rightToLeft = /[\p{Script=Hebrew}\p{Script=Arabic}\p{Script=Syriac}\p{Script=Thaana}\p{Script=Nko}\p{Script=Samaritan}\p{Script=Mandaic}\p{Script=Adlam}]/u;

export function textDirection(text: string): TextDirection {
  const letter = firstLetter.exec(text)?.[0];
  return letter !== undefined && rightToLeft.test(letter) ? 'rtl' : 'ltr';
}

/** The side text starts from: where a node without an `align` of its own sits. */
export function startSide(direction: TextDirection | undefined): 'left' | 'right' {
  return direction === 'rtl' ? 'right' : 'left';
}
