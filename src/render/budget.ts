import { AppError } from '../lib/errors.js';

/**
 * What one render may cost. Rendering runs on the event loop at accept time, so a template must not be
 * able to hold it: six boxes iterating over one 40-item array render 40^6 times, a chart can take 0.4 s,
 * and thousands of text nodes each lex their markdown. Every limit is far past any real email.
 */
export const renderLimits = {
  /** Wall time of one render; checked between nodes, so one last node (a chart) may run past it. */
  ms: 2_000,
  /** Nodes and iterated rows rendered, each repetition counted (the content itself has at most 2,000 nodes). */
  units: 20_000,
  /**
   * Characters of HTML produced (nested boxes count their content again). It bounds what a small request
   * can make the appliance hold: at 20 million, a 95 kB template send rendered 38 million characters of
   * html and text. Six times the custom-html limit (1,024,000): markdown within the spec's 102,400
   * characters renders below it unless built to (inline code 5.1 million, fenced code 5.6; a table of
   * ten thousand one-character cells passes it).
   */
  outputChars: 6_144_000,
  /** Characters of the plain text; markdown's is about its source's length. */
  textChars: 2_048_000,
} as const;

export class RenderBudget {
  private units = 0;
  private outputChars = 0;
  private readonly deadline: number;

  constructor(private readonly limits: { ms: number; units: number; outputChars: number } = renderLimits) {
    this.deadline = performance.now() + limits.ms;
  }

  /** Before rendering `count` more nodes or rows. */
  spend(count = 1): void {
    this.units += count;
    if (this.units > this.limits.units) {
      throw new AppError('parameters-invalid', `The template renders more than ${this.limits.units} nodes and rows (every iterated item counts): iterate over fewer items or nest fewer iterations.`);
    }
    this.checkTime();
  }

  /** After a node rendered `chars` characters of HTML. */
  produced(chars: number): void {
    this.outputChars += chars;
    if (this.outputChars > this.limits.outputChars) throw renderedTooLarge(this.limits.outputChars);
  }

  /** Milliseconds left, for work that can be interrupted (markdown lexing). */
  remainingMs(): number {
    return Math.max(1, Math.round(this.deadline - performance.now()));
  }

  checkTime(): void {
    if (performance.now() > this.deadline) {
      throw new AppError('parameters-invalid', `The template takes too long to render (over ${this.limits.ms} ms): use fewer charts, iterated items or markdown text.`);
    }
  }
}

export function renderedTooLarge(limitChars: number = renderLimits.outputChars, part: 'email' | "email's text" = 'email'): AppError {
  return new AppError('parameters-invalid', `The rendered ${part} is larger than ${limitChars.toLocaleString('en-US')} characters.`);
}
