import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig, settingOrigin } from '../../src/config/load.js';
import { renderExampleToml } from '../../src/config/example.js';
import { configSpec } from '../../src/config/schema.js';
import { hostNames } from '../../src/config/host-names.js';

const tempDir = () => mkdtempSync(join(tmpdir(), 'postino-config-'));

test('defaults apply when nothing is configured', () => {
  const config = loadConfig({ cwd: tempDir(), env: {}, argv: [] });
  assert.equal(config.http.host, '127.0.0.1');
  assert.equal(config.http.port, 8080);
  assert.equal(config.smtp.port, 2525);
  assert.equal(config.storage.data_dir, './data');
  assert.equal(config.delivery.mode, 'mx');
  assert.equal(config.delivery.port, 25);
  assert.deepEqual(config.dns.servers, []);
  assert.deepEqual(config.delivery.retry_schedule, [300_000, 600_000, 1_800_000, 3_600_000, 7_200_000, 14_400_000]);
});

test('precedence: config.toml < environment < CLI flags', () => {
  const cwd = tempDir();
  writeFileSync(join(cwd, 'config.toml'), '[http]\nport = 9001\nhost = "0.0.0.0"\n[log]\nlevel = "warn"\n[dns]\nservers = ["127.0.0.1:5353"]\n');
  const fileOnly = loadConfig({ cwd, env: {}, argv: [] });
  assert.equal(fileOnly.http.port, 9001);
  assert.equal(fileOnly.http.host, '0.0.0.0');
  assert.deepEqual(fileOnly.dns.servers, ['127.0.0.1:5353']);

  const withEnv = loadConfig({ cwd, env: { POSTINO_HTTP_PORT: '9002', POSTINO_DELIVERY_RETRY_SCHEDULE: '2s,2s,2s' }, argv: [] });
  assert.equal(withEnv.http.port, 9002);
  assert.equal(withEnv.http.host, '0.0.0.0', 'keys not overridden keep the file value');
  assert.deepEqual(withEnv.delivery.retry_schedule, [2000, 2000, 2000]);

  const withFlags = loadConfig({ cwd, env: { POSTINO_HTTP_PORT: '9002' }, argv: ['--http.port=9003', '--log-level', 'error'] });
  assert.equal(withFlags.http.port, 9003);
  assert.equal(withFlags.log.level, 'error');
});

test('each setting remembers where it was read from: the source that won, none for a default', () => {
  const cwd = tempDir();
  writeFileSync(join(cwd, 'config.toml'), '[http]\nport = 9001\nhost = "0.0.0.0"\n[webhooks]\nurl = "https://hooks.example.com/file"\n');
  const config = loadConfig({ cwd, env: { POSTINO_HTTP_PORT: '9002', POSTINO_WEBHOOKS_URL: 'https://hooks.example.com/env' }, argv: ['--http.port=9003'] });
  assert.deepEqual(settingOrigin(config, 'http.host'), { kind: 'file', path: join(cwd, 'config.toml') });
  assert.deepEqual(settingOrigin(config, 'webhooks.url'), { kind: 'env', name: 'POSTINO_WEBHOOKS_URL' });
  assert.deepEqual(settingOrigin(config, 'http.port'), { kind: 'flag', name: '--http.port' });
  assert.equal(settingOrigin(config, 'smtp.port'), undefined);
});

test('--config PATH selects another file, and a missing one is an error', () => {
  const cwd = tempDir();
  writeFileSync(join(cwd, 'other.toml'), '[smtp]\nport = 2626\n');
  assert.equal(loadConfig({ cwd, env: {}, argv: ['--config', 'other.toml'] }).smtp.port, 2626);
  assert.throws(() => loadConfig({ cwd, env: {}, argv: ['--config', 'nope.toml'] }), /nope\.toml does not exist/);
});

test('an empty --config or POSTINO_CONFIG (an unset ${VAR}) is refused, not read as "no file given"', () => {
  const cwd = tempDir();
  writeFileSync(join(cwd, 'other.toml'), '[delivery]\nmode = "capture"\n');
  assert.throws(() => loadConfig({ cwd, env: { POSTINO_CONFIG: '' }, argv: [] }), (error: unknown) => error instanceof ConfigError && /^POSTINO_CONFIG is empty: /.test(error.message));
  assert.throws(() => loadConfig({ cwd, env: {}, argv: ['--config='] }), (error: unknown) => error instanceof ConfigError && /^--config is empty: /.test(error.message));
  // The flag wins over the variable, as for every setting.
  assert.equal(loadConfig({ cwd, env: { POSTINO_CONFIG: '' }, argv: ['--config', 'other.toml'] }).delivery.mode, 'capture');
});

test('bad values stop the boot with a message naming the key', () => {
  const cwd = tempDir();
  const cases: [Record<string, string>, string[], RegExp][] = [
    [{ POSTINO_HTTP_PORT: 'eighty' }, [], /http\.port .*whole number/],
    [{ POSTINO_HTTP_PORT: '70000' }, [], /http\.port .*between 0 and 65535/],
    [{ POSTINO_DELIVERY_MODE: 'carrier-pigeon' }, [], /delivery\.mode .*one of mx, relay, capture/],
    [{ POSTINO_DELIVERY_GIVE_UP_AFTER: 'soon' }, [], /delivery\.give_up_after .*duration/],
    [{ POSTINO_SCHEDULER_ENABLED: 'maybe' }, [], /scheduler\.enabled .*true or false/],
    [{}, ['--http.nope=1'], /unknown flag --http\.nope/],
    [{}, ['--http.port'], /--http\.port needs a value/],
    [{ POSTINO_HTTP_PORT: '0x4650' }, [], /http\.port .*whole number/],
    [{ POSTINO_HTTP_PORT: '1e4' }, [], /http\.port .*whole number/],
    // Durations: never zero where zero would spin, never past what a timer can wait.
    [{ POSTINO_WEBHOOKS_POLL_INTERVAL: '30d' }, [], /webhooks\.poll_interval .*: must be between 50ms and 24d, got "30d"/],
    [{ POSTINO_WEBHOOKS_POLL_INTERVAL: '0s' }, [], /webhooks\.poll_interval .*must be between 50ms and 24d/],
    [{ POSTINO_DELIVERY_RETRY_SCHEDULE: '5m,0s' }, [], /delivery\.retry_schedule .*every entry must be between 100ms and 24d/],
    [{ POSTINO_DELIVERY_CONNECT_TIMEOUT: '0s' }, [], /delivery\.connect_timeout .*must be between 1ms and 24d/],
    // Renewed with a timer every third of itself: past Node's timer limit that would fire every 1 ms.
    [{ POSTINO_DELIVERY_LEASE: '100d' }, [], /delivery\.lease .*must be between 1ms and 24d/],
    // Counted per UTC day: a window under one kept a project paused until midnight all the same.
    [{ POSTINO_DELIVERY_SUSPENSION_WINDOW: '1h' }, [], /delivery\.suspension_window .*must be between 1d and 3650d/],
    // A misspelt variable is refused, not ignored (a CI sandbox would otherwise deliver for real).
    [{ POSTINO_DELIVERY_MOD: 'capture' }, [], /unknown environment variable POSTINO_DELIVERY_MOD \(did you mean POSTINO_DELIVERY_MODE\?\)/],
    [{ POSTINO_SOMETHING_ELSE: '1' }, [], /unknown environment variable POSTINO_SOMETHING_ELSE; settings are POSTINO_<SECTION>_<KEY>/],
    [{ POSTINO_STORAGE_DATA_DIR: '' }, [], /storage\.data_dir \(from POSTINO_STORAGE_DATA_DIR\): must name a directory \(it is empty\), got ""/],
  ];
  for (const [env, argv, message] of cases) {
    assert.throws(() => loadConfig({ cwd, env, argv }), (error: unknown) => error instanceof ConfigError && message.test(error.message));
  }
  writeFileSync(join(cwd, 'config.toml'), '[http]\nprot = 1\n');
  assert.throws(() => loadConfig({ cwd, env: {}, argv: [] }), /unknown key http\.prot/);
  writeFileSync(join(cwd, 'config.toml'), '[http\nport = 1\n');
  assert.throws(() => loadConfig({ cwd, env: {}, argv: [] }), ConfigError);
  // Names every object has are no settings: refused like any unknown key, not a TypeError.
  writeFileSync(join(cwd, 'config.toml'), '[http]\ntoString = "x"\n');
  assert.throws(() => loadConfig({ cwd, env: {}, argv: [] }), (error: unknown) => error instanceof ConfigError && /unknown key http\.toString/.test(error.message));
  writeFileSync(join(cwd, 'config.toml'), '[constructor]\nx = 1\n');
  assert.throws(() => loadConfig({ cwd, env: {}, argv: [] }), /unknown section \[constructor\]/);
  // A key above the first header belongs to no section; a wrong value names the file it came from.
  writeFileSync(join(cwd, 'config.toml'), 'port = 1\n[http]\nhost = "0.0.0.0"\n');
  assert.throws(() => loadConfig({ cwd, env: {}, argv: [] }), /config\.toml: port is outside any section: every setting goes under a \[section\] header/);
  writeFileSync(join(cwd, 'config.toml'), '[http]\nport = "abc"\n');
  assert.throws(() => loadConfig({ cwd, env: {}, argv: [] }), /http\.port \(in \/.*\/config\.toml\): must be a whole number/);
  assert.throws(() => loadConfig({ cwd: tempDir(), env: {}, argv: ['--http.hasOwnProperty=1'] }), /unknown flag --http\.hasOwnProperty/);
});

test('a secret setting is never echoed in an error; an API key with a space, which no Bearer header can carry, is refused', () => {
  const cwd = tempDir();
  writeFileSync(join(cwd, 'config.toml'), '[auth]\napi_key = 123456789\n');
  assert.throws(
    () => loadConfig({ cwd, env: {}, argv: [] }),
    (error: unknown) => error instanceof ConfigError && /auth\.api_key \(in .*config\.toml\): must be a string, got a value not shown \(a secret\)/.test(error.message) && !error.message.includes('123456789'),
  );
  for (const key of ['pst_abc ', ' pst_abc', 'pst a', 'pst_\tx']) {
    assert.throws(
      () => loadConfig({ cwd: tempDir(), env: { POSTINO_AUTH_API_KEY: key }, argv: [] }),
      (error: unknown) => error instanceof ConfigError && /auth\.api_key \(from POSTINO_AUTH_API_KEY\): must be printable ASCII without spaces/.test(error.message) && !error.message.includes('pst'),
      JSON.stringify(key),
    );
  }
  assert.equal(loadConfig({ cwd: tempDir(), env: { POSTINO_AUTH_API_KEY: 'pst_ok-key_123' }, argv: [] }).auth.api_key, 'pst_ok-key_123');
  writeFileSync(join(cwd, 'config.toml'), '[webhooks]\nsecret = ["whsec_x"]\n');
  assert.throws(() => loadConfig({ cwd, env: {}, argv: [] }), (error: unknown) => error instanceof ConfigError && !(error as Error).message.includes('whsec_x'));
});

test('an empty listen address is refused, not taken as every interface (an unset ${VAR} in an env file)', () => {
  const httpRule = 'must be an IPv4 address, an IPv6 address without brackets or zone (::1, :: for every interface), or a host name of at most 63 characters';
  for (const [variable, key] of [['POSTINO_HTTP_HOST', 'http.host'], ['POSTINO_SMTP_HOST', 'smtp.host'], ['POSTINO_SUBMISSION_HOST', 'submission.host']]) {
    const rule = key === 'http.host' ? httpRule : 'must name an address to listen on (it is empty; 0.0.0.0 is every interface)';
    assert.throws(
      () => loadConfig({ cwd: tempDir(), env: { [variable]: '' }, argv: [] }),
      (error: unknown) => error instanceof ConfigError && error.message.includes(`${key} (from ${variable}): ${rule}`),
      variable,
    );
  }
  const cwd = tempDir();
  writeFileSync(join(cwd, 'config.toml'), '[smtp]\nhost = " "\n');
  assert.throws(() => loadConfig({ cwd, env: {}, argv: [] }), /smtp\.host \(in .*config\.toml\): must name an address to listen on/);
  assert.equal(loadConfig({ cwd: tempDir(), env: { POSTINO_HTTP_HOST: '0.0.0.0' }, argv: [] }).http.host, '0.0.0.0');
});

test("http.host the API's listener cannot read is refused: it bound every interface instead ([::1], a zone, a name over 63 characters)", () => {
  for (const host of [' ', '[::1]', 'fe80::1%eth0', `${'a'.repeat(30)}.${'b'.repeat(33)}`, '-api.local']) {
    assert.throws(() => loadConfig({ cwd: tempDir(), env: { POSTINO_HTTP_HOST: host }, argv: [] }), /http\.host \(from POSTINO_HTTP_HOST\): must be an IPv4 address, an IPv6 address without brackets or zone/, host);
  }
  for (const host of ['::1', '::', '0:0:0:0:0:0:0:1', '10.0.0.5', 'api.internal', 'localhost']) assert.equal(loadConfig({ cwd: tempDir(), env: { POSTINO_HTTP_HOST: host }, argv: [] }).http.host, host);
});

test('durations where 0 means off, and ages longer than a timer can wait, are accepted', () => {
  const config = loadConfig({
    cwd: tempDir(),
    env: { POSTINO_DELIVERY_DNS_CACHE_TTL: '0s', POSTINO_DELIVERY_CAPTURE_RETENTION: '0s', POSTINO_WEBHOOKS_RETENTION: '365d', POSTINO_DELIVERY_GIVE_UP_AFTER: '30d' },
    argv: [],
  });
  assert.equal(config.delivery.dns_cache_ttl, 0);
  assert.equal(config.delivery.capture_retention, 0);
  assert.equal(config.webhooks.retention, 365 * 86_400_000);
  assert.equal(config.delivery.give_up_after, 30 * 86_400_000);
});

test('config.example.toml documents every key with its default and loads as-is', () => {
  const committed = readFileSync('config.example.toml', 'utf8');
  assert.equal(committed, renderExampleToml(), 'config.example.toml is stale: run `npm run config:example`');
  for (const [section, keys] of Object.entries(configSpec)) {
    assert.match(committed, new RegExp(`^\\[${section}\\]$`, 'm'));
    for (const key of Object.keys(keys)) assert.match(committed, new RegExp(`^${key} = `, 'm'), `${section}.${key} missing`);
  }
  const cwd = tempDir();
  writeFileSync(join(cwd, 'config.toml'), committed);
  assert.deepEqual(loadConfig({ cwd, env: {}, argv: [] }), loadConfig({ cwd: tempDir(), env: {}, argv: [] }));
});

test('settings the appliance checks at boot with its API rules: the config webhook endpoint, http.public_url', async () => {
  const { startAppliance } = await import('../helpers/appliance.js');
  await assert.rejects(startAppliance({ env: { POSTINO_WEBHOOKS_URL: 'notaurl' } }), /webhooks\.url: must be an http\(s\) URL/);
  await assert.rejects(startAppliance({ env: { POSTINO_WEBHOOKS_URL: 'https://hooks.example.com/x', POSTINO_WEBHOOKS_EVENTS: 'email.delivered,email.bogus' } }), /webhooks\.events: "email\.bogus" must be one of/);
  await assert.rejects(startAppliance({ env: { POSTINO_DELIVERY_HELO_NAME: 'bad name with spaces' } }), /delivery\.helo_name must be a host name/);
  // Names in greetings (and in DNS records without domains.mail_hostname) too; an address literal is for HELO only.
  for (const [variable, setting] of [['POSTINO_SMTP_HOSTNAME', 'smtp.hostname'], ['POSTINO_SUBMISSION_HOSTNAME', 'submission.hostname']]) {
    await assert.rejects(startAppliance({ env: { [variable]: 'bad name' } }), new RegExp(`${setting.replace('.', '\\.')} must be a host name such as mta\\.example\\.net \\(letters, digits, hyphens and dots\\), got "bad name"`));
    await assert.rejects(startAppliance({ env: { [variable]: '[203.0.113.5]' } }), new RegExp(`${setting.replace('.', '\\.')} must be a host name`));
  }
  // Two listeners on one port: named at once, not a bind failure that looks like another program's.
  await assert.rejects(startAppliance({ env: { POSTINO_SMTP_PORT: '12999', POSTINO_SUBMISSION_PORT: '12999' } }), /submission\.port and smtp\.port are both 12999: each listener needs a port of its own/);
  await assert.rejects(startAppliance({ env: { POSTINO_HTTP_PORT: '12998', POSTINO_HTTP_HOST: '127.0.0.1', POSTINO_SMTP_PORT: '12998' } }), /smtp\.port and http\.port are both 12998/);
  await assert.rejects(startAppliance({ env: { POSTINO_HTTP_TRUSTED_PROXIES: '10.0.0.1,proxy.local' } }), /http\.trusted_proxies: "proxy\.local" is not an IP address or a CIDR range/);
  // A file the appliance cannot read is a configuration error (one sentence, no stack trace).
  await assert.rejects(startAppliance({ env: { POSTINO_DELIVERY_EXTRA_CA_FILE: '/nonexistent/ca.pem' } }), (error: Error) => error.name === 'ConfigError' && /delivery\.extra_ca_file "\/nonexistent\/ca\.pem" cannot be read/.test(error.message));
  // Checked also while no URL is set, each problem once.
  await assert.rejects(
    startAppliance({ env: { POSTINO_WEBHOOKS_EVENTS: 'email.sent,email.gone', POSTINO_WEBHOOKS_SECRET: 'short' } }),
    (error: Error) => /webhooks\.events: "email\.sent" must be one of .*; webhooks\.events: "email\.gone" must be one of .*; webhooks\.secret: /.test(error.message),
  );
  await assert.rejects(startAppliance({ env: { POSTINO_HTTP_PUBLIC_URL: 'mail.example.com' } }), /http\.public_url must be an http\(s\) base URL/);
  await assert.rejects(startAppliance({ env: { POSTINO_WEBHOOKS_URL: 'http://127.0.0.1:9000/hooks' } }), /webhooks\.url: 127\.0\.0\.1 is a private address; webhooks are not sent there unless webhooks\.allow_private is set/);
  await assert.rejects(startAppliance({ env: { POSTINO_WEBHOOKS_URL: 'https://hooks.example.com/x', POSTINO_WEBHOOKS_SECRET: 'whsec_not*valid*base64!' } }), /webhooks\.secret: a whsec_ secret is whsec_ followed by the Base64/);
  // A relay URL with the mode left at mx would be ignored: refused, and checked in every mode; capture may override a relay configuration.
  await assert.rejects(startAppliance({ env: { POSTINO_DELIVERY_RELAY_URL: 'smtp://user:pass@smtp.provider.example:587' } }), /delivery\.relay_url is set but delivery\.mode is "mx", which delivers to the MX hosts and never uses it: set delivery\.mode = "relay"/);
  await assert.rejects(startAppliance({ env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_DELIVERY_RELAY_URL: 'not a url at all' } }), /delivery\.relay_url/);
  const captureOverRelay = await startAppliance({ env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_DELIVERY_RELAY_URL: 'smtp://user:pass@smtp.provider.example:587' } });
  await captureOverRelay.stop();
  // Beyond loopback a configured key or metrics token of a few characters is refused (guessed in seconds); on loopback it is a sandbox's.
  await assert.rejects(startAppliance({ env: { POSTINO_HTTP_HOST: '0.0.0.0', POSTINO_AUTH_API_KEY: 'secret' } }), /auth\.api_key must have at least 16 characters when the API listens beyond loopback \(http\.host = 0\.0\.0\.0\)/);
  // Each told what to do about it: no metrics token is ever generated.
  await assert.rejects(startAppliance({ env: { POSTINO_HTTP_HOST: '0.0.0.0', POSTINO_AUTH_API_KEY: 'secret' } }), /or leave auth\.api_key empty to have one generated$/);
  await assert.rejects(startAppliance({ env: { POSTINO_HTTP_HOST: '0.0.0.0', POSTINO_HTTP_METRICS_TOKEN: 'metrics' } }), (error: Error) => {
    assert.match(error.message, /http\.metrics_token must have at least 16 characters/);
    assert.doesNotMatch(error.message, /auth\.api_key/);
    return true;
  });
  const shortOnLoopback = await startAppliance({ env: { POSTINO_AUTH_API_KEY: 'test', POSTINO_HTTP_METRICS_TOKEN: 'm' } });
  await shortOnLoopback.stop();
  // Listening beyond loopback without a public URL: tracking links would point at 127.0.0.1.
  const exposed = await startAppliance({ env: { POSTINO_HTTP_HOST: '0.0.0.0' } });
  await exposed.stop();
  assert.ok(exposed.logs.some((line) => line.includes('http.public_url is not set')));
  // On loopback too when mail leaves the machine (mx, relay): its tracking links would point at 127.0.0.1.
  const sending = await startAppliance({ env: { POSTINO_DELIVERY_MODE: 'mx' } });
  await sending.stop();
  assert.ok(sending.logs.some((line) => line.includes('http.public_url is not set')));
  const sandbox = await startAppliance({ env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_SUBMISSION_ENABLED: 'false' } });
  await sandbox.stop();
  assert.ok(!sandbox.logs.some((line) => line.includes('http.public_url is not set')), 'a loopback sandbox keeps its mail: no warning');
  assert.ok(sandbox.logs.some((line) => /"msg":"postino started".*"listening":\{"http":"127\.0\.0\.1:\d+"/.test(line)), 'the started line names the addresses');
  assert.ok(sandbox.logs.some((line) => /"msg":"postino started".*"submission":"disabled"/.test(line)), 'a disabled listener says so, not port 0');
  // A HELO name that is no domain (a machine called `vm`): receivers that ask for one refuse every message.
  const unqualified = await startAppliance({ env: { POSTINO_DELIVERY_MODE: 'mx', POSTINO_DELIVERY_HELO_NAME: 'vm' } });
  await unqualified.stop();
  assert.ok(unqualified.logs.some((line) => line.includes('delivery.helo_name is not a fully qualified domain name') && line.includes('"heloName":"vm"')));
  const qualified = await startAppliance({ env: { POSTINO_DELIVERY_MODE: 'mx', POSTINO_DELIVERY_HELO_NAME: 'mta.example.net' } });
  await qualified.stop();
  assert.ok(!qualified.logs.some((line) => line.includes('delivery.helo_name is not a fully qualified')));
  assert.ok(!sandbox.logs.some((line) => line.includes('delivery.helo_name is not a fully qualified')), 'capture sends nothing: no warning');
});

test('[domains] settings go into every sending domain\'s records: checked at boot with the rules of DNS', async () => {
  const { startAppliance } = await import('../helpers/appliance.js');
  await assert.rejects(startAppliance({ env: { POSTINO_DOMAINS_MAIL_HOSTNAME: 'mail host' } }), /domains\.mail_hostname must be a fully qualified host name/);
  await assert.rejects(startAppliance({ env: { POSTINO_DOMAINS_MAIL_HOSTNAME: 'localhost' } }), /domains\.mail_hostname must be a fully qualified host name/);
  await assert.rejects(startAppliance({ env: { POSTINO_DOMAINS_SPF_MECHANISMS: 'ip4:203.0.113.5,include _spf.example.net' } }), /domains\.spf_mechanisms: "include _spf\.example\.net" is not an SPF mechanism/);
  await assert.rejects(startAppliance({ env: { POSTINO_DOMAINS_SPF_MECHANISMS: '~all' } }), /not an SPF mechanism/);
  await assert.rejects(startAppliance({ env: { POSTINO_DOMAINS_MAIL_FROM_SUBDOMAIN: 'bounce_here' } }), /domains\.mail_from_subdomain must be DNS labels/);
  await assert.rejects(startAppliance({ env: { POSTINO_DOMAINS_DMARC_RUA: 'mailto:dmarc@example.net' } }), /domains\.dmarc_rua must be an email address/);
  // Domain Connect: a template that is no providerId/serviceId, or a UX URL that is no URL, gave every domain a
  // dcUrl of null or a broken link without a word; one of the two without the other, dcUrl null.
  const dc = async (provider: string, uxUrl: string) => (await startAppliance({ env: { POSTINO_DOMAINS_DOMAIN_CONNECT_PROVIDER: provider, POSTINO_DOMAINS_DOMAIN_CONNECT_UX_URL: uxUrl } })).stop();
  await assert.rejects(dc('postino.example', 'https://dc.example-dns.com'), /domains\.domain_connect_provider must be providerId\/serviceId such as example\.net\/sending, got "postino\.example"/);
  await assert.rejects(dc('postino.example/sending', 'dc.example-dns.com'), /domains\.domain_connect_ux_url must be an http\(s\) URL such as https:\/\/domainconnect\.example-dns\.com, got "dc\.example-dns\.com"/);
  await assert.rejects(dc('postino.example/sending', ''), /domains\.domain_connect_provider and domains\.domain_connect_ux_url go together/);
  await assert.rejects(dc('', 'https://dc.example-dns.com'), /domains\.domain_connect_provider and domains\.domain_connect_ux_url go together/);

  // Accepted and normalised: case, a trailing dot, IPv6 and CIDR forms.
  const app = await startAppliance({
    env: {
      POSTINO_DOMAINS_MAIL_HOSTNAME: 'MX.Example.NET.',
      POSTINO_DOMAINS_SPF_MECHANISMS: 'ip4:203.0.113.0/24,ip6:2001:db8::5,a:mx.example.net/24,-ptr,include:_spf.example.net',
      POSTINO_DOMAINS_MAIL_FROM_SUBDOMAIN: 'Mail.Bounce',
      POSTINO_DOMAINS_DMARC_RUA: 'dmarc@example.net',
    },
  });
  try {
    const created = (await app.api('POST', '/v1/domains', { domain: 'settings.example.com' })).body;
    const value = (purpose: string) => created.dns.find((r: { purpose: string }) => r.purpose === purpose).value;
    assert.equal(value('mail-from-mx'), 'mx.example.net');
    assert.equal(created.mailFromDomain, 'mail.bounce.settings.example.com');
    assert.equal(value('spf'), 'v=spf1 ip4:203.0.113.0/24 ip6:2001:db8::5 a:mx.example.net/24 -ptr include:_spf.example.net ~all');
    assert.match(value('dmarc'), /rua=mailto:dmarc@example\.net;/);
  } finally {
    await app.stop();
  }

  // Unset, with a fallback that is not a fully qualified name: said when a domain is added.
  const unqualified = await startAppliance({ env: { POSTINO_DELIVERY_HELO_NAME: 'buildhost' } });
  try {
    assert.ok(!unqualified.logs.some((line) => line.includes('domains.mail_hostname is not set')), 'nothing said before a domain is added');
    await unqualified.api('POST', '/v1/domains', { domain: 'fallback.example.com' });
    assert.ok(unqualified.logs.some((line) => line.includes('domains.mail_hostname is not set') && line.includes('buildhost')));
  } finally {
    await unqualified.stop();
  }

  // A HELO address literal is passed over: the records point to the next name in the fallback chain.
  const literal = await startAppliance({ env: { POSTINO_DELIVERY_HELO_NAME: '[203.0.113.5]', POSTINO_SMTP_HOSTNAME: 'mx.fallback.example' } });
  try {
    const created = (await literal.api('POST', '/v1/domains', { domain: 'literal.example.com' })).body;
    assert.equal(created.dns.find((r: { purpose: string }) => r.purpose === 'mail-from-mx').value, 'mx.fallback.example');
  } finally {
    await literal.stop();
  }
});

test('links in mail reach the appliance unless mail leaves the machine with no http.public_url and the API on a loopback address (0.0.0.0 and :: read as 127.0.0.1)', async () => {
  const { linksReachable } = await import('../../src/appliance.js');
  const reachable = (env: Record<string, string>) => linksReachable(loadConfig({ cwd: tempDir(), env, argv: [] }));
  for (const host of ['127.0.0.1', '::1', 'localhost', '0.0.0.0', '::', '0:0:0:0:0:0:0:0', '0:0::1']) assert.equal(reachable({ POSTINO_HTTP_HOST: host }), false, host);
  assert.equal(reachable({ POSTINO_HTTP_HOST: '192.168.1.10' }), true, 'a LAN address is one recipients on the LAN reach');
  assert.equal(reachable({ POSTINO_HTTP_PUBLIC_URL: 'https://mail.example.com' }), true);
  assert.equal(reachable({ POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: 'smtp://relay.example.net:587' }), false);
  assert.equal(reachable({ POSTINO_DELIVERY_MODE: 'capture' }), true, 'a sandbox reads its mail here');
});

test('the names announced fall back key to key, then to the machine name: submission to smtp, smtp and HELO to the machine', () => {
  const names = (smtp: string, submission: string, helo: string) =>
    hostNames({ smtp: { hostname: smtp }, submission: { hostname: submission }, delivery: { helo_name: helo } } as never, 'box.lan');
  assert.deepEqual(names('', '', ''), { smtp: 'box.lan', submission: 'box.lan', helo: 'box.lan' });
  assert.deepEqual(names('mx.example.net', '', ''), { smtp: 'mx.example.net', submission: 'mx.example.net', helo: 'box.lan' });
  assert.deepEqual(names('mx.example.net', 'smtp.example.net', 'out.example.net'), { smtp: 'mx.example.net', submission: 'smtp.example.net', helo: 'out.example.net' });
});
