import type { Logger } from '../lib/logger.js';

/**
 * Attempts in a row that reached no mail host (no MX answered, or DNS failed) before the log says
 * delivery itself looks cut off, and how many destinations they must span: one domain's hosts being down
 * is that domain's trouble, several at once is this machine's.
 */
export const unreachedAttemptsToWarn = 10;
export const unreachedDomainsToWarn = 3;

/**
 * Watches whether direct-to-MX delivery reaches anything. A provider blocking outbound port 25 (most
 * cloud VPSs by default), or a resolver that is down, defers every email at info level and keeps it
 * queued for days with nothing else said; relay mode warns of its relay, mx mode had no such line. Said
 * once per episode, and once again when a host answers.
 */
export function createReachWatch(log: Logger) {
  let unreached = 0;
  const domains = new Set<string>();
  let warned = false;
  return {
    /** An attempt's result: `answered` false when no host gave an SMTP reply (refused, timed out, DNS failure). */
    observe(domain: string, answered: boolean, reason: string): void {
      if (answered) {
        if (warned) log.info('delivery reaches mail hosts again', { domain });
        unreached = 0;
        domains.clear();
        warned = false;
        return;
      }
      unreached++;
      if (domains.size < unreachedDomainsToWarn) domains.add(domain);
      if (warned || unreached < unreachedAttemptsToWarn || domains.size < unreachedDomainsToWarn) return;
      warned = true;
      log.warn(
        `no mail host answered the last ${unreached} delivery attempts, to ${domains.size} or more domains: outbound port 25 may be blocked (many providers block it by default), or DNS fails. Mail waits and is retried; if port 25 stays closed, send through a smarthost (delivery.mode = "relay", delivery.relay_url)`,
        { lastReason: reason, domains: [...domains] },
      );
    },
  };
}
