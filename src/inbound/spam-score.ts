import type { SpamVerdict } from '../db/schema/inbound.js';
import type { AuthVerdicts } from './auth-verdicts.js';

/**
 * The built-in spam verdict (spec §2.8 `spam`): a score from the sender's authentication (SPF, DKIM,
 * DMARC) and a few header checks, not a content filter. Rules are a table (DESIGN convention 5); the
 * symbol names follow rspamd's where it has one, so filters written for either read the same.
 */
export const spamThreshold = 5;

interface MessageFacts {
  auth: AuthVerdicts;
  hasSubject: boolean;
  hasDate: boolean;
  hasMessageId: boolean;
  hasText: boolean;
  hasHtml: boolean;
  /** A From address: RFC 5322 §3.6 requires one, and without it DMARC has no domain to check (RFC 7489 §6.6.1). */
  hasFrom: boolean;
  /** More than one From address (receive.ts fromOf): DMARC fails without a policy lookup (withMultipleFromFailed). */
  multipleFrom: boolean;
}

const rules: { symbol: string; score: number; applies: (facts: MessageFacts) => boolean }[] = [
  { symbol: 'R_SPF_FAIL', score: 3, applies: (f) => f.auth.spf.result === 'fail' },
  { symbol: 'R_SPF_SOFTFAIL', score: 1.5, applies: (f) => f.auth.spf.result === 'softfail' },
  { symbol: 'R_SPF_NA', score: 0.5, applies: (f) => f.auth.spf.result === 'none' },
  { symbol: 'R_SPF_ALLOW', score: -0.2, applies: (f) => f.auth.spf.result === 'pass' },
  { symbol: 'R_DKIM_REJECT', score: 2, applies: (f) => f.auth.dkim.length > 0 && f.auth.dkim.every((d) => d.result === 'fail') },
  { symbol: 'R_DKIM_NA', score: 0.5, applies: (f) => f.auth.dkim.length === 0 },
  { symbol: 'R_DKIM_ALLOW', score: -0.2, applies: (f) => f.auth.dkim.some((d) => d.result === 'pass') },
  { symbol: 'DMARC_POLICY_REJECT', score: 5, applies: (f) => f.auth.dmarc.result === 'fail' && f.auth.dmarc.policy === 'reject' },
  { symbol: 'DMARC_POLICY_QUARANTINE', score: 3.5, applies: (f) => f.auth.dmarc.result === 'fail' && f.auth.dmarc.policy === 'quarantine' },
  // A failure under the domain's p=none; the fail of a message with several From addresses is no policy's (MULTIPLE_FROM).
  { symbol: 'DMARC_POLICY_SOFTFAIL', score: 1.5, applies: (f) => f.auth.dmarc.result === 'fail' && !f.multipleFrom && f.auth.dmarc.policy !== 'reject' && f.auth.dmarc.policy !== 'quarantine' },
  { symbol: 'DMARC_POLICY_ALLOW', score: -0.5, applies: (f) => f.auth.dmarc.result === 'pass' },
  // rspamd's score: spam by itself, even beside SPF and DKIM that pass for the sender's own domain (−0.4);
  // the second From is how a forged From under p=reject got past DMARC (withMultipleFromFailed).
  { symbol: 'MULTIPLE_FROM', score: 8, applies: (f) => f.multipleFrom },
  // rspamd's score. Not spam alone: DMARC, which such a message escapes, is scored by the rules above.
  { symbol: 'MISSING_FROM', score: 2, applies: (f) => !f.hasFrom },
  { symbol: 'MISSING_SUBJECT', score: 1, applies: (f) => !f.hasSubject },
  { symbol: 'MISSING_DATE', score: 1, applies: (f) => !f.hasDate },
  { symbol: 'MISSING_MID', score: 1, applies: (f) => !f.hasMessageId },
  { symbol: 'EMPTY_BODY', score: 1, applies: (f) => !f.hasText && !f.hasHtml },
  { symbol: 'MIME_HTML_ONLY', score: 0.2, applies: (f) => f.hasHtml && !f.hasText },
];

export function scoreSpam(facts: MessageFacts): SpamVerdict {
  const matched = rules.filter((rule) => rule.applies(facts));
  const score = Math.round(matched.reduce((sum, rule) => sum + rule.score, 0) * 100) / 100;
  const isSpam = score >= spamThreshold;
  return { score, threshold: spamThreshold, isSpam, action: isSpam ? 'add header' : 'no action', symbols: matched.map((rule) => rule.symbol) };
}
