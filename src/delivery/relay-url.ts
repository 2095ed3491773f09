import { domainToASCII } from 'node:url';
import { ConfigError } from '../config/load.js';
import type { SmtpTarget } from './smtp-client.js';

/** `smtp://user:pass@host:587?starttls=required` or `smtps://user:pass@host:465` (`tls_verify=false` for self-signed relays). */
export function parseRelayUrl(text: string): SmtpTarget {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    // Not echoed: the text holds the relay's password.
    const problem = text === '' ? 'is empty (relay mode needs it)' : 'is not a URL (percent-encode /, #, ? and @ in the user name and password)';
    throw new ConfigError(`delivery.relay_url ${problem}: smtp://user:pass@host:587 or smtps://user:pass@host:465`);
  }
  if (url.protocol !== 'smtp:' && url.protocol !== 'smtps:') throw new ConfigError(`delivery.relay_url must start with smtp:// or smtps://`);
  const secure = url.protocol === 'smtps:';
  const host = relayHost(url);
  // A `#` or `/` in an unencoded password ends the user info early: `smtp://apikey:1234#secret@relay`
  // reads as host apikey, port 1234 and no password, and started without a word.
  if (url.hash || (url.pathname !== '' && url.pathname !== '/')) {
    throw new ConfigError('delivery.relay_url has a path or a #fragment, which a relay URL never has: percent-encode /, #, ? and @ in the user name and password');
  }
  if (url.port === '0') throw new ConfigError('delivery.relay_url: port 0 is no port to connect to');
  if (Boolean(url.username) !== Boolean(url.password)) {
    throw new ConfigError(`delivery.relay_url gives ${url.username ? 'a user name without a password' : 'a password without a user name'}: give both (smtp://user:pass@host:587), or neither`);
  }
  const starttls = relayOption(url, 'starttls', ['required', 'optional']);
  const tlsVerify = relayOption(url, 'tls_verify', ['true', 'false']);
  const unknown = [...url.searchParams.keys()].filter((key) => !relayOptions.includes(key));
  if (unknown.length > 0) throw new ConfigError(`delivery.relay_url: unknown option ${unknown.join(', ')} (the options are ${relayOptions.join(' and ')})`);
  const auth = url.username ? { user: decodeUserInfo(url.username), pass: decodeUserInfo(url.password) } : undefined;
  // With credentials, STARTTLS is required unless the URL says otherwise: a relay (or whoever sits in
  // between) that does not offer it would otherwise be sent the password in clear.
  const requireTls = starttls === 'required' || (starttls === undefined && auth !== undefined);
  return {
    host,
    address: host,
    port: url.port ? Number(url.port) : secure ? 465 : 587,
    secure,
    requireTls,
    ...(requireTls ? { tlsRequiredBy: relayTlsRequiredBy(starttls) } : {}),
    verifyTls: tlsVerify !== 'false',
    auth,
    // The relay is one destination for the domain limiter ('relay'), and for the connection cap.
    group: 'relay',
  };
}

const relayOptions = ['starttls', 'tls_verify'];

/**
 * Why a relay session needs STARTTLS, told when the relay offers none. `?starttls=optional` is named as
 * what it is: the session then goes on in plaintext and the credentials with it (the AUTH after EHLO).
 */
function relayTlsRequiredBy(starttls: string | undefined): string {
  if (starttls === 'required') return 'delivery.relay_url requires it (?starttls=required), so the mail waits';
  return 'delivery.relay_url has credentials, which are never sent in clear, so the mail waits. Enable STARTTLS on the relay, or add ?starttls=optional to the URL to send them without TLS to a relay that offers none';
}

/**
 * The relay's host as a resolver takes it. URL leaves the host of an smtp:// URL percent-encoded (it
 * punycodes only http-like schemes): `bücher.example` came out as `b%C3%BCcher.example`, a name no
 * resolver knows. Decoded and made ASCII (xn--…) here; one that cannot be is refused.
 */
function relayHost(url: URL): string {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (!host) throw new ConfigError('delivery.relay_url names no host: smtp://user:pass@host:587');
  if (!host.includes('%')) return host;
  let ascii = '';
  try {
    ascii = domainToASCII(decodeURIComponent(host));
  } catch {
    // not percent-encoding at all: refused below
  }
  if (!ascii) throw new ConfigError('delivery.relay_url: the host is not a host name');
  return ascii;
}

/** A query option of delivery.relay_url, one of `values`; a misspelt value is refused, not ignored. */
function relayOption(url: URL, name: string, values: string[]): string | undefined {
  const value = url.searchParams.get(name);
  if (value === null) return undefined;
  if (!values.includes(value)) throw new ConfigError(`delivery.relay_url: ${name}=${value} is not one of ${values.join(', ')}`);
  return value;
}

/** A percent-encoded user name or password of delivery.relay_url; a bare % (`50%off`) is named, not a URIError. */
function decodeUserInfo(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new ConfigError('delivery.relay_url: the user name or password holds a % that starts no percent-encoding; write % as %25');
  }
}
