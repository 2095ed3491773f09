import { isIP } from 'node:net';

/**
 * True for addresses a webhook must not reach unless the operator allows it: loopback, RFC 1918 private,
 * CGNAT, link-local (cloud metadata at 169.254.169.254), unspecified, multicast, IPv6 ULA and mapped forms.
 * Guards against SSRF: a project's webhook URL must not be a way into the appliance's own network.
 */
export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return isPrivateIpv4(address);
  if (family === 6) return isPrivateIpv6(address.toLowerCase());
  return true;
}

function isPrivateIpv4(address: string): boolean {
  const [a, b] = address.split('.').map(Number);
  if (a === 0 || a === 10 || a === 127) return true;
  if (a === 169 && b === 254) return true;
  if (a === 172 && b >= 16 && b <= 31) return true;
  if (a === 192 && b === 168) return true;
  if (a === 100 && b >= 64 && b <= 127) return true;
  if (a >= 224) return true;
  return false;
}

function isPrivateIpv6(address: string): boolean {
  if (address === '::' || address === '::1') return true;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(address);
  if (mapped) return isPrivateIpv4(mapped[1]);
  if (/^f[cd]/.test(address)) return true; // fc00::/7 unique local
  if (/^fe[89ab]/.test(address)) return true; // fe80::/10 link-local
  if (address.startsWith('ff')) return true; // multicast
  return false;
}
