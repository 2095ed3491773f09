import { hostname } from 'node:os';
import type { Config } from './schema.js';

/**
 * The names each listener and the SMTP client announce, each key falling back to the next and the
 * machine's own name last, as config.example.toml describes them; worked out here once, so the greeting,
 * the TLS certificate, the trace headers and the bounce addresses all use the same name.
 */
export interface HostNames {
  /** Inbound SMTP's greeting, trace headers and Authentication-Results (smtp.hostname). */
  smtp: string;
  /** The submission listener's greeting and generated certificate (submission.hostname, else smtp's). */
  submission: string;
  /** What the delivery client says in EHLO (delivery.helo_name). */
  helo: string;
}

export function hostNames(config: Pick<Config, 'smtp' | 'submission' | 'delivery'>, machineName = hostname()): HostNames {
  const smtp = config.smtp.hostname || machineName;
  return {
    smtp,
    submission: config.submission.hostname || smtp,
    helo: config.delivery.helo_name || machineName,
  };
}
