import { BlockList, isIP } from 'node:net';

/**
 * `http.trusted_proxies`: the reverse proxies whose X-Forwarded-For is believed. Entries are addresses
 * or CIDR ranges (a container network such as 172.17.0.0/16). Matching goes through node:net's
 * BlockList, which compares addresses, not strings: an IPv4-mapped peer (::ffff:10.0.0.2), upper-case or
 * differently compressed IPv6 all match the entry they stand for.
 */
export interface TrustedProxies {
  has(address: string | undefined): boolean;
}

export const noTrustedProxies: TrustedProxies = { has: () => false };

/** Throws an Error naming the first entry that is neither an address nor a range. */
export function parseTrustedProxies(entries: readonly string[]): TrustedProxies {
  if (entries.length === 0) return noTrustedProxies;
  const list = new BlockList();
  for (const entry of entries) addEntry(list, entry);
  return {
    has(address) {
      const family = address === undefined ? 0 : isIP(address);
      return family !== 0 && list.check(address!, family === 6 ? 'ipv6' : 'ipv4');
    },
  };
}

function addEntry(list: BlockList, entry: string): void {
  const [address, prefix, extra] = entry.trim().split('/');
  const family = isIP(address);
  const maxPrefix = family === 6 ? 128 : 32;
  if (family === 0 || extra !== undefined) throw new Error(`${JSON.stringify(entry)} is not an IP address or a CIDR range`);
  if (prefix === undefined) return list.addAddress(address, family === 6 ? 'ipv6' : 'ipv4');
  const bits = /^\d{1,3}$/.test(prefix) ? Number(prefix) : NaN;
  if (!(bits >= 0 && bits <= maxPrefix)) throw new Error(`${JSON.stringify(entry)} has a prefix length outside 0-${maxPrefix}`);
  list.addSubnet(address, bits, family === 6 ? 'ipv6' : 'ipv4');
}
