import { BlockList, isIP } from 'node:net';

/**
 * Addresses the appliance must not connect to for a tenant unless the operator allows it (webhook URLs,
 * MX hosts, MTA-STS policy hosts): loopback, RFC 1918, CGNAT, link-local (cloud metadata at
 * 169.254.169.254), benchmarking and documentation ranges, unspecified, multicast and reserved, IPv6 ULA,
 * link-local and documentation. Guards against SSRF into the appliance's own network.
 */
const privateRanges = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 3], // multicast, reserved and broadcast: 224-255
] as const) {
  privateRanges.addSubnet(network, prefix, 'ipv4');
}
for (const [network, prefix] of [
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10], // site-local (deprecated, still routed inside some networks)
  ['ff00::', 8],
  ['64:ff9b:1::', 48], // local-use NAT64 (RFC 8215): the network's own translator, to any IPv4 it chooses
  ['2001:db8::', 32],
  ['100::', 64], // discard-only
] as const) {
  privateRanges.addSubnet(network, prefix, 'ipv6');
}

/** RFC 6761 §6.3: `localhost` and names under it are loopback, written with a final dot or not. */
export function isLocalhostName(host: string): boolean {
  const name = host.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost');
}

export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return privateRanges.check(address, 'ipv4');
  if (family !== 6) return true;
  // An IPv4 address inside an IPv6 one reaches that IPv4 host: [::ffff:127.0.0.1], which URLs write as
  // [::ffff:7f00:1], is loopback. `::` and `::1` fall in the IPv4-compatible form (0.0.0.0, 0.0.0.1).
  const embedded = embeddedIpv4(address);
  if (embedded) return privateRanges.check(embedded, 'ipv4');
  return privateRanges.check(address, 'ipv6');
}

/**
 * The IPv4 address of the IPv4-mapped (::ffff:0:0/96), IPv4-translated (::ffff:0:0:0/96), IPv4-compatible (::/96) and NAT64 (64:ff9b::/96)
 * forms, in the last 32 bits; and of 6to4 (2002::/16, RFC 3056), right after the prefix.
 */
function embeddedIpv4(address: string): string | undefined {
  const groups = ipv6Groups(address);
  if (!groups) return undefined;
  const zeros = (from: number, to: number) => groups.slice(from, to).every((group) => group === 0);
  if (groups[0] === 0x2002) return dottedQuad(groups[1]!, groups[2]!);
  const mapped = zeros(0, 5) && groups[5] === 0xffff;
  // IPv4-translated (::ffff:0:0:0/96, RFC 2765 SIIT): a translator on the path reaches the IPv4 host.
  const translated = zeros(0, 4) && groups[4] === 0xffff && groups[5] === 0;
  const compatible = zeros(0, 6);
  const nat64 = groups[0] === 0x64 && groups[1] === 0xff9b && zeros(2, 6);
  if (!mapped && !translated && !compatible && !nat64) return undefined;
  return dottedQuad(groups[6]!, groups[7]!);
}

/**
 * One spelling per address: an IPv6 one compressed and in lower case, without its zone (`fe80::1%eth0`),
 * and one mapping an IPv4 address, however written (`::ffff:cb00:7109`), as that IPv4 address. Anything
 * else (an IPv4 address, a name) as it is.
 */
export function canonicalAddress(address: string): string {
  const groups = isIP(address.replace(/%.*$/, '')) === 6 ? ipv6Groups(address) : undefined;
  if (!groups) return address;
  if (groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff) return dottedQuad(groups[6]!, groups[7]!);
  return new URL(`http://[${groups.map((group) => group.toString(16)).join(':')}]`).hostname.slice(1, -1);
}

const dottedQuad = (high: number, low: number) => [high >> 8, high & 0xff, low >> 8, low & 0xff].join('.');

/** A loopback address (127/8, ::1, an IPv4-mapped 127/8) or the name localhost. */
export function isLoopbackAddress(address: string): boolean {
  const canonical = canonicalAddress(address);
  return canonical.toLowerCase() === 'localhost' || canonical === '::1' || (isIP(canonical) === 4 && canonical.startsWith('127.'));
}

/**
 * The network one host holds that `address` is in: an IPv4 address itself (also written IPv4-mapped,
 * `::ffff:192.0.2.1`), an IPv6 address's /64, which is what a host is given (RFC 7421): counted address by
 * address, one host with 26 addresses of its /64 held every session of an SMTP listener.
 */
export function hostNetworkOf(address: string): string {
  const canonical = canonicalAddress(address);
  const groups = isIP(canonical) === 6 ? ipv6Groups(canonical) : undefined;
  return groups ? `${canonicalAddress([...groups.slice(0, 4), 0, 0, 0, 0].map((group) => group.toString(16)).join(':'))}/64` : canonical;
}

/** The eight 16-bit groups of a valid IPv6 address (`::` expanded, a trailing dotted quad converted). */
function ipv6Groups(address: string): number[] | undefined {
  let text = address.toLowerCase().replace(/%.*$/, '');
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (quad) {
    const [a, b, c, d] = quad.slice(1).map(Number);
    text = `${text.slice(0, quad.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::');
  const parse = (part: string | undefined) => (part ? part.split(':').map((group) => parseInt(group, 16)) : []);
  const front = parse(head);
  const back = parse(tail);
  const groups = tail === undefined ? front : [...front, ...Array(8 - front.length - back.length).fill(0), ...back];
  return groups.length === 8 && groups.every((group) => Number.isInteger(group) && group >= 0 && group <= 0xffff) ? groups : undefined;
}
