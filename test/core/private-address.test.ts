import assert from 'node:assert/strict';
import { test } from 'node:test';
import { canonicalAddress, hostNetworkOf, isPrivateAddress } from '../../src/lib/private-address.js';

// One guard for webhook URLs, MX hosts and MTA-STS policy hosts (SSRF into the appliance's network).
test('private, loopback, link-local and reserved addresses are refused, in every IPv6 spelling of an IPv4 one', () => {
  const refused = [
    '127.0.0.1', '127.255.0.1', '10.1.2.3', '172.16.0.1', '172.31.255.255', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0',
    '224.0.0.1', '255.255.255.255', '192.0.2.10', '198.18.0.1',
    '::', '::1', 'fe80::1', 'fd00::1', 'ff02::1', '2001:db8::1',
    // IPv4-mapped: what `new URL('http://[::ffff:127.0.0.1]/')` turns the host into, and the dotted form.
    '::ffff:127.0.0.1', '::ffff:7f00:1', '::ffff:a9fe:a9fe', '0:0:0:0:0:ffff:7f00:1',
    // IPv4-translated (SIIT, RFC 2765): reached through a translator on the path.
    '::ffff:0:127.0.0.1', '::ffff:0:a9fe:a9fe', '0:0:0:0:ffff:0:a00:1',
    // IPv4-compatible and NAT64 forms of loopback and private addresses.
    '::7f00:1', '::127.0.0.1', '64:ff9b::a00:1', '64:ff9b::10.0.0.1',
    // Local-use NAT64 (RFC 8215), site-local, and 6to4 around a private IPv4 (2002:0a00:0001:: is 10.0.0.1).
    '64:ff9b:1::a00:1', '64:ff9b:1:2::8.8.8.8', 'fec0::1', '2002:a00:1::1', '2002:7f00:1::', '2002:c0a8:101:1::5',
    'not-an-ip', '',
  ];
  for (const address of refused) assert.equal(isPrivateAddress(address), true, address);
  const allowed = ['8.8.8.8', '172.32.0.1', '93.184.216.34', '142.250.1.27', '2606:4700::1111', '2a00:1450:4001::1b', '::ffff:8.8.8.8', '::ffff:808:808', '::ffff:0:808:808', '64:ff9b::808:808', '2002:808:808::1'];
  for (const address of allowed) assert.equal(isPrivateAddress(address), false, address);
});

test('one spelling per address: IPv6 compressed in lower case without its zone, IPv4-mapped as IPv4; a host is its IPv4 address or IPv6 /64', () => {
  const cases: [string, string, string][] = [
    ['2001:DB8:0:0:0:0:0:5', '2001:db8::5', '2001:db8::/64'],
    ['fe80::fc:ff:fe00:1%eth0', 'fe80::fc:ff:fe00:1', 'fe80::/64'],
    ['::ffff:cb00:7109', '203.0.113.9', '203.0.113.9'],
    ['::ffff:203.0.113.9', '203.0.113.9', '203.0.113.9'],
    ['0:0:0:0:0:0:0:0', '::', '::/64'],
    ['192.0.2.1', '192.0.2.1', '192.0.2.1'],
    ['mx.example.com', 'mx.example.com', 'mx.example.com'],
  ];
  for (const [address, canonical, host] of cases) assert.deepEqual([canonicalAddress(address), hostNetworkOf(address)], [canonical, host], address);
  // What is no address stays as it is (a forwarded hop that is not one is then refused as such).
  for (const text of ['::ffff:1.2.3', 'unknown', '1.2.3.4.5', '2001:db8::g']) assert.equal(canonicalAddress(text), text);
});
