import { monospaceFontStack } from '../templates/fonts.js';
import { codeTheme, highlightCode } from './highlight.js';
import type { Theme } from './theme.js';
import type { CodeLanguage } from './types.js';

/**
 * A highlighted code block. It is dark in both colour schemes so the token colours need no dark variant,
 * and it wraps long lines (`pre-wrap`) because a horizontal scrollbar inside an email is unusable on
 * phones and breaks the 600 px body in Outlook.
 */
export function codeBlockHtml(code: string, language: CodeLanguage, extraStyle = ''): string {
  const body = highlightCode(code.replace(/\r\n?/g, '\n').replace(/\n+$/, ''), language);
  const box = `background-color:${codeTheme.background};border:1px solid ${codeTheme.border};border-radius:8px;padding:16px 18px${extraStyle}`;
  const pre = `margin:0;font-family:${monospaceFontStack};font-size:13px;line-height:1.6;color:${codeTheme.text};white-space:pre-wrap;word-wrap:break-word;word-break:break-word;overflow-wrap:anywhere`;
  return `<table role="presentation" width="100%" cellpadding="0" cellspacing="0" border="0" style="border-collapse:separate;table-layout:fixed"><tr><td class="cb" style="${box}"><pre style="${pre}">${body}</pre></td></tr></table>`;
}

export function inlineCodeStyle(theme: Theme): string {
  return `font-family:${monospaceFontStack};font-size:0.9em;background-color:${theme.light.subtle};border-radius:4px;padding:1px 5px`;
}
