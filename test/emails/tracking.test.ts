import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { simpleParser } from 'mailparser';
import { createUrlSigner } from '../../src/lib/signing.js';
import { createHtmlTracker } from '../../src/emails/tracking.js';
import { clientAddress } from '../../src/http/router.js';
import { noTrustedProxies, parseTrustedProxies } from '../../src/http/trusted-proxies.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { fillDisk, freeDisk } from '../helpers/full-disk.js';
import { waitUntil } from '../helpers/wait-until.js';
import { systemClock } from '../../src/lib/clock.js';
import { baseEmail, emailRow } from './helpers.js';

// Tracking is applied when the message is composed: capture mode keeps the message as it would leave.
let app: TestAppliance;
const sql = (query: string, ...args: unknown[]) => app.appliance.context.database.sqlite.prepare(query).all(...args) as any[];

before(async () => {
  app = await startAppliance({
    env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_SENDING_CLICK_TRACKING: 'true', POSTINO_DELIVERY_MODE: 'capture' },
  });
});
after(() => app?.stop());

/** The html part of the message as delivered (captured), once delivery has run. */
async function sentHtml(id: string, key?: string): Promise<string> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const res = await app.api('GET', `/v1/captured/${id}`, undefined, { key });
    if (res.status === 200) return String((await simpleParser(Buffer.from(res.body as string))).html);
    if (Date.now() > deadline) assert.fail(`no captured message for ${id}: ${JSON.stringify(res.body)}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function send(fields: Record<string, unknown>): Promise<string> {
  const res = await app.api('POST', '/v1/email/send', { ...baseEmail, text: undefined, ...fields });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.id;
}

test('the sent html carries the pixel and rewritten links; the stored html and htmlReferenceUrl stay as given', async () => {
  const given = '<html><body><p>Hi</p><a href="https://example.com/x">x</a></body></html>';
  const id = await send({ html: given });
  const sent = await sentHtml(id);
  // First in the body, where Gmail's cut of a long message (~102 KB) cannot reach it.
  assert.match(sent, /<body><img src="http:\/\/127\.0\.0\.1:\d+\/t\/o\/[^"]+"[^>]*\/><p>Hi<\/p>/);
  assert.match(sent, /<a href="http:\/\/127\.0\.0\.1:\d+\/t\/c\/[^"]+">x<\/a>/);
  assert.equal(emailRow(app, id)!.html, given);
  assert.equal(emailRow(app, id)!.is_open_tracked, 1);
  const { email } = (await app.api('GET', `/v1/email/${id}`)).body;
  assert.equal(await (await fetch(email.htmlReferenceUrl)).text(), given, 'viewing the reference records no open');
});

test('isOpenTracked false: no pixel in the sent html', async () => {
  const id = await send({ html: '<p>quiet</p>', isOpenTracked: false });
  const sent = await sentHtml(id);
  assert.doesNotMatch(sent, /\/t\/o\//);
  assert.match(sent, /<p>quiet<\/p>/);
});

test('the pixel records opens with IP and user agent, moves delivered → open; clicks redirect and are recorded', async () => {
  const id = await send({ html: '<body><a href="https://example.com/x">x</a></body>' });
  const html = await sentHtml(id);
  const pixel = /src="([^"]+\/t\/o\/[^"]+)"/.exec(html)![1];
  assert.equal(emailRow(app, id)!.status, 'delivered');
  // Without http.trusted_proxies a client's X-Forwarded-For is not believed.
  const first = await fetch(pixel, { headers: { 'user-agent': 'TestMail/1.0', 'x-forwarded-for': '198.51.100.7' } });
  assert.equal(first.status, 200);
  assert.equal(first.headers.get('content-type'), 'image/gif');
  await fetch(pixel);
  const { email } = (await app.api('GET', `/v1/email/${id}`)).body;
  assert.equal(email.status, 'open');
  const opens = email.events.filter((e: any) => e.type === 'open');
  assert.equal(opens.length, 2);
  assert.equal(opens[0].userAgent, 'TestMail/1.0');
  assert.equal(opens[0].ipAddress, '127.0.0.1');
  const forged = await fetch(pixel.slice(0, -2) + 'xx');
  assert.equal(forged.status, 200, 'a forged pixel still answers the gif');
  // Even one that is not valid percent-encoding: the gif, not a JSON error; a click link so broken is 404.
  const garbled = await fetch(`${app.baseUrl}/t/o/%ZZ`);
  assert.deepEqual([garbled.status, garbled.headers.get('content-type')], [200, 'image/gif']);
  assert.equal((await fetch(`${app.baseUrl}/t/c/%ZZ`, { redirect: 'manual' })).status, 404);
  assert.equal(sql("select count(*) as n from email_events where email_id = ? and type = 'open'", id)[0].n, 2, 'but records nothing');

  const click = /href="([^"]+\/t\/c\/[^"]+)"/.exec(html)![1];
  const redirect = await fetch(click, { redirect: 'manual' });
  assert.equal(redirect.status, 302);
  assert.equal(redirect.headers.get('location'), 'https://example.com/x');
  assert.equal(sql("select count(*) as n from email_events where email_id = ? and type = 'click'", id)[0].n, 1);
  // A cut or altered link: the person who clicked gets a page saying so, not the API's JSON error.
  const altered = await fetch(click.slice(0, -3) + 'abc', { redirect: 'manual' });
  assert.deepEqual([altered.status, altered.headers.get('content-type')], [404, 'text/html; charset=utf-8']);
  assert.match(await altered.text(), /<html lang="en">.*<title>Link not valid<\/title>.*cut short by your email program/s);
  const cut = await fetch(click.slice(0, 60), { redirect: 'manual' });
  assert.deepEqual([cut.status, cut.headers.get('content-type')], [404, 'text/html; charset=utf-8']);
  // The metrics and the access log count the redirect as what it was.
  const metrics = await (await fetch(`${app.baseUrl}/metrics`)).text();
  assert.match(metrics, /postino_http_requests_total\{method="GET",route="\/t\/c\/:token",status="302"\} 1/);
  assert.ok(app.logs.some((line) => /"route":"\/t\/c\/:token","status":302/.test(line)), 'access log');

  // Link scanners probe with HEAD: the same answer, and no open or click recorded for it.
  const probedPixel = await fetch(pixel, { method: 'HEAD' });
  assert.equal(probedPixel.status, 200);
  assert.equal(probedPixel.headers.get('content-type'), 'image/gif');
  const probedClick = await fetch(click, { method: 'HEAD', redirect: 'manual' });
  assert.equal(probedClick.status, 302);
  assert.equal(probedClick.headers.get('location'), 'https://example.com/x');
  assert.equal((await fetch(click.slice(0, -3) + 'abc', { method: 'HEAD', redirect: 'manual' })).status, 404);
  assert.equal(sql("select count(*) as n from email_events where email_id = ? and type = 'open'", id)[0].n, 2);
  assert.equal(sql("select count(*) as n from email_events where email_id = ? and type = 'click'", id)[0].n, 1);
});

test("a click link whose email is gone (its project deleted) shows where it led instead of redirecting: a deleted tenant's links stay no open redirect on the operator's domain", async () => {
  const tenant = await app.api('POST', '/v1/project', { name: 'tenant' });
  assert.equal(tenant.status, 200, JSON.stringify(tenant.body));
  const sent = await app.api('POST', '/v1/email/send', { ...baseEmail, text: undefined, html: '<body><a href="https://evil.example/phish?a=1&amp;b=2">Sign in</a></body>' }, { key: tenant.body.apiKey });
  assert.equal(sent.status, 200, JSON.stringify(sent.body));
  const click = /href="([^"]+\/t\/c\/[^"]+)"/.exec(await sentHtml(sent.body.id, tenant.body.apiKey))![1];
  const before = await fetch(click, { redirect: 'manual' });
  assert.deepEqual([before.status, before.headers.get('location')], [302, 'https://evil.example/phish?a=1&b=2']);
  assert.deepEqual((await app.api('DELETE', '/v1/project', {}, { key: tenant.body.apiKey })).body, { deleted: true });
  for (const method of ['GET', 'HEAD']) {
    const after = await fetch(click, { method, redirect: 'manual' });
    assert.deepEqual([after.status, after.headers.get('location'), after.headers.get('content-type')], [200, null, 'text/html; charset=utf-8'], method);
    if (method === 'GET') {
      const page = await after.text();
      assert.match(page, /<h1>This link's email is no longer on file<\/h1>/);
      assert.match(page, /<a href="https:\/\/evil\.example\/phish\?a=1&amp;b=2" rel="noreferrer">https:\/\/evil\.example\/phish\?a=1&amp;b=2<\/a>/, 'the destination shown, escaped');
    }
  }
  assert.equal(sql('select count(*) as n from email_events where email_id = ?', sent.body.id)[0].n, 0, 'nothing recorded for an email not on file');
});

test('the first open writes one email.open webhook event when an endpoint subscribes', async () => {
  const hook = await app.api('POST', '/v1/webhooks', { url: 'https://hooks.example.com/x', events: ['email.open'] });
  assert.equal(hook.status, 201, JSON.stringify(hook.body));
  const id = await send({ html: '<p>x</p>' });
  const pixel = /src="([^"]+\/t\/o\/[^"]+)"/.exec(await sentHtml(id))![1];
  // A user agent as long as anyone cares to send: cut as in the record, in the webhook too.
  const agent = `Mozilla/5.0 ${'X'.repeat(3000)}`;
  await fetch(pixel, { headers: { 'user-agent': agent } });
  await fetch(pixel);
  const events = sql("select data from webhook_events where type = 'email.open'").filter((e) => JSON.parse(e.data).id === id);
  assert.equal(events.length, 1);
  assert.equal(JSON.parse(events[0].data).userAgent, agent.slice(0, 512));
  assert.equal(sql("select user_agent from email_events where email_id = ? and type = 'open' order by time", id)[0].user_agent, agent.slice(0, 512));
});

test('entity references in a link are read as a browser reads an attribute: the redirect goes where the untracked link went', async () => {
  // HTML §13.2.5.73: &nbsp; is U+00A0 (not a space, and not stripped from the URL's end); a reference
  // without its `;` is decoded unless a letter, digit or `=` follows (`&copy=2` stays as written).
  const links = [
    ['https://example.com/x&nbsp;y', 'https://example.com/x%C2%A0y'],
    ['https://example.com/page&nbsp;', 'https://example.com/page%C2%A0'],
    ['https://example.com/?a=1&amp&b=2', 'https://example.com/?a=1&&b=2'],
    ['https://example.com/?a=1&copy=2&amp;c=3', 'https://example.com/?a=1&copy=2&c=3'],
  ];
  const id = await send({ html: `<body>${links.map(([href]) => `<a href="${href}">x</a>`).join('')}</body>` });
  const html = await sentHtml(id);
  const targets: string[] = [];
  for (const [, click] of html.matchAll(/href="([^"]+\/t\/c\/[^"]+)"/g)) targets.push((await fetch(click, { redirect: 'manual' })).headers.get('location')!);
  assert.deepEqual(targets, links.map(([, target]) => target));
});

test('a link whose text shows a web address stays as written: through the redirect, its text would name another host than its href, which receivers score as phishing', async () => {
  // rspamd's PHISHING (3.9 points) and similar filters compare a link's visible URL with its href.
  const shown = [
    '<a href="https://shop.example.org/orders/1">https://shop.example.org/orders/1</a>',
    '<A HREF="https://shop.example.org/">  <b>www.shop.example.org</b> </A>',
    '<a href="https://shop.example.org/help">shop.example.org/help</a>',
    '<a href="https://shop.example.org/">HTTPS://SHOP.EXAMPLE.ORG</a>',
  ];
  const worded = '<a href="https://shop.example.org/orders/1">View your order</a>';
  const id = await send({ html: `<body>${shown.join('<br>')}<p>${worded}</p></body>` });
  const html = await sentHtml(id);
  for (const link of shown) assert.ok(html.includes(link), `kept as written: ${link}`);
  assert.match(html, /<a href="[^"]+\/t\/c\/[^"]+">View your order<\/a>/, 'a link with words for text is tracked');
});

test('the Outlook (VML) half of a bulletproof button and image-map areas are tracked as the <a> links are', async () => {
  // The VML button is the one Outlook for Windows shows and its readers click; other clients show the <a>.
  const button = '<!--[if mso]><v:roundrect xmlns:v="urn:schemas-microsoft-com:vml" href="https://example.com/button" style="height:40px;width:200px" arcsize="10%" fillcolor="#d62828"><w:anchorlock/><center>Go</center></v:roundrect><![endif]--><!--[if !mso]><!--><a href="https://example.com/button">Go</a><!--<![endif]-->';
  const map = '<img src="https://example.com/map.png" usemap="#m"><map name="m"><area shape="rect" coords="0,0,10,10" HREF="https://example.com/area"></map>';
  const id = await send({ html: `<body>${button}${map}</body>` });
  const html = await sentHtml(id);
  assert.doesNotMatch(html, /href="https:\/\/example\.com/i, html);
  const targets: string[] = [];
  for (const [, click] of html.matchAll(/href="([^"]+\/t\/c\/[^"]+)"/gi)) targets.push((await fetch(click, { redirect: 'manual' })).headers.get('location')!);
  assert.deepEqual(targets, ['https://example.com/button', 'https://example.com/button', 'https://example.com/area']);
  assert.match(html, /<v:roundrect xmlns:v="urn:schemas-microsoft-com:vml" href="[^"]+\/t\/c\/[^"]+" style="height:40px;width:200px"/, 'the rest of the tag as written');
});

test('a click implies an open: a reader whose client blocked the pixel moves the email to open, with one email.open', async () => {
  const hook = await app.api('POST', '/v1/webhooks', { url: 'https://hooks.example.com/click-open', events: ['email.open'] });
  assert.equal(hook.status, 201, JSON.stringify(hook.body));
  const id = await send({ html: '<body><a href="https://example.com/clicked">x</a></body>' });
  const html = await sentHtml(id);
  const click = /href="([^"]+\/t\/c\/[^"]+)"/.exec(html)![1];
  assert.equal((await fetch(click, { redirect: 'manual', headers: { 'user-agent': 'NoImages/1.0' } })).status, 302);
  const { email } = (await app.api('GET', `/v1/email/${id}`)).body;
  assert.equal(email.status, 'open');
  assert.deepEqual(email.events.filter((e: any) => e.type === 'open' || e.type === 'click').map((e: any) => [e.type, e.userAgent]), [['open', 'NoImages/1.0'], ['click', 'NoImages/1.0']]);
  const opens = () => sql("select data from webhook_events where type = 'email.open'").filter((e) => JSON.parse(e.data).id === id);
  assert.equal(opens().length, 1);
  assert.equal(JSON.parse(opens()[0].data).userAgent, 'NoImages/1.0');
  // The images shown later, another click: still the first open only.
  await fetch(/src="([^"]+\/t\/o\/[^"]+)"/.exec(html)![1]);
  await fetch(click, { redirect: 'manual' });
  assert.equal(opens().length, 1);
  assert.equal(sql("select count(*) as n from email_events where email_id = ? and type = 'open'", id)[0].n, 2, 'the implied open and the pixel');

  // The sender asked for no open tracking: a click is a click only.
  const quiet = await send({ html: '<body><a href="https://example.com/quiet">x</a></body>', isOpenTracked: false });
  await fetch(/href="([^"]+\/t\/c\/[^"]+)"/.exec(await sentHtml(quiet))![1], { redirect: 'manual' });
  assert.equal(emailRow(app, quiet)!.status, 'delivered');
  assert.deepEqual(sql('select type from email_events where email_id = ? and type in (?, ?)', quiet, 'open', 'click'), [{ type: 'click' }]);
});

test('html tracked by an older version (at accept time) is not tracked twice', () => {
  const track = createHtmlTracker({ signer: createUrlSigner('s'.repeat(64)), publicUrl: () => 'https://mail.example.com', clickTracking: true, linksReachable: true });
  const once = track('<html><body><a href="https://example.com/a?b=1&amp;c=2">a</a></body></html>', '0123456789abcdef01234567', true);
  assert.equal((once.match(/\/t\/o\//g) ?? []).length, 1);
  assert.equal((once.match(/\/t\/c\//g) ?? []).length, 1);
  assert.equal(track(once, '0123456789abcdef01234567', true), once);
  const other = track(once, 'fedcba9876543210fedcba98', true);
  assert.equal((other.match(/\/t\/c\//g) ?? []).length, 1, 'a link already through the redirect is never wrapped again');
});

test("the pixel goes first in the body, past its attributes, before a template's preheader; a fragment without a body gets it at the end", () => {
  const track = createHtmlTracker({ signer: createUrlSigner('s'.repeat(64)), publicUrl: () => 'https://mail.example.com', clickTracking: false, linksReachable: true });
  const laidOut = track('<!DOCTYPE html><html><head><title>t</title></head><body class="body pb" style="margin:0">\n<div class="ph">preheader</div><p>long newsletter</p></body></html>', '0123456789abcdef01234567', true);
  assert.match(laidOut, /<body class="body pb" style="margin:0"><img src="https:\/\/mail\.example\.com\/t\/o\/[^"]+"[^>]*\/>\n<div class="ph">/);
  assert.match(track('<p>fragment</p>', '0123456789abcdef01234567', true), /^<p>fragment<\/p><img src="https:\/\/mail\.example\.com\/t\/o\//);
});

test('links that would reach no recipient (mail leaving the machine, no http.public_url): nothing is tracked', () => {
  const track = createHtmlTracker({ signer: createUrlSigner('s'.repeat(64)), publicUrl: () => 'http://127.0.0.1:8080', clickTracking: true, linksReachable: false });
  const html = '<html><body><a href="https://example.com/a">a</a></body></html>';
  assert.equal(track(html, '0123456789abcdef01234567', true), html);
});

test("the appliance's own links (a broadcast's unsubscribe link) are not wrapped in the click redirect: scanners would count clicks on them", () => {
  const track = createHtmlTracker({ signer: createUrlSigner('s'.repeat(64)), publicUrl: () => 'https://mail.example.com', clickTracking: true, linksReachable: true });
  const html = track('<html><body><a href="https://example.com/a">a</a><a href="https://mail.example.com/t/u/abc">Unsubscribe</a></body></html>', '0123456789abcdef01234567', false);
  assert.match(html, /<a href="https:\/\/mail\.example\.com\/t\/c\/[^"]+">a<\/a>/);
  assert.match(html, /<a href="https:\/\/mail\.example\.com\/t\/u\/abc">Unsubscribe<\/a>/);
});

test('links that are not plain ASCII URLs redirect to their normalised form; the pixel goes first inside <BODY>', async () => {
  const id = await send({
    html: '<HTML><BODY><a href="https://ru.wikipedia.org/wiki/Почта">ru</a><a href="https://example.com/a?utm=1&#38;b=2">amp</a><a href="https://example.com/x\r\nSet-Cookie: a=1">crlf</a></BODY></HTML>',
  });
  const html = await sentHtml(id);
  assert.match(html, /<BODY><img src="[^"]+\/t\/o\/[^"]+"[^>]*\/><a /, "pixel first inside the body");
  const locations: string[] = [];
  for (const [, click] of html.matchAll(/href="([^"]+\/t\/c\/[^"]+)"/g)) {
    const redirect = await fetch(click, { redirect: 'manual' });
    assert.equal(redirect.status, 302);
    locations.push(redirect.headers.get('location')!);
  }
  assert.deepEqual(locations, [
    'https://ru.wikipedia.org/wiki/%D0%9F%D0%BE%D1%87%D1%82%D0%B0',
    'https://example.com/a?utm=1&b=2',
    'https://example.com/xSet-Cookie:%20a=1',
  ]);
});

test('links written unquoted, with an apostrophe in a double-quoted URL, or padded with spaces are tracked and redirect to the link', async () => {
  // Minifiers drop attribute quotes (`href=https://…`), titles put apostrophes in paths, and browsers
  // strip the spaces around an href: each is a link the reader can click, so each click is recorded.
  const links = [
    ['<a href=https://example.com/unquoted?a=1>u</a>', 'https://example.com/unquoted?a=1'],
    ['<a href="https://en.wikipedia.org/wiki/Ender\'s_Game">apos</a>', "https://en.wikipedia.org/wiki/Ender's_Game"],
    ['<a href=\'https://example.com/say?q="hi"\'>dq</a>', 'https://example.com/say?q=%22hi%22'],
    ['<a href=" https://example.com/padded ">pad</a>', 'https://example.com/padded'],
  ];
  const id = await send({ html: `<body>${links.map(([link]) => link).join('\n')}</body>` });
  const html = await sentHtml(id);
  const clicks = [...html.matchAll(/href=(["'])([^"']+\/t\/c\/[^"']+)\1/g)].map((match) => match[2]);
  assert.equal(clicks.length, links.length, html);
  const locations: string[] = [];
  for (const click of clicks) locations.push((await fetch(click, { redirect: 'manual' })).headers.get('location')!);
  assert.deepEqual(locations, links.map(([, target]) => target));
  assert.doesNotMatch(html, /example\.com|wikipedia/, 'no link left untracked');
});

test('a pixel fetched in a loop stores at most 100 opens for the email; the status still moves', async () => {
  const id = await send({ html: '<body><p>loop</p></body>' });
  const pixel = /src="([^"]+\/t\/o\/[^"]+)"/.exec(await sentHtml(id))![1];
  for (let i = 0; i < 120; i += 10) await Promise.all(Array.from({ length: 10 }, () => fetch(pixel).then((r) => r.arrayBuffer())));
  assert.equal(sql("select count(*) as n from email_events where email_id = ? and type = 'open'", id)[0].n, 100);
  assert.equal(emailRow(app, id)!.status, 'open');
});

test('behind a trusted proxy the client address comes from X-Forwarded-For, nearest untrusted hop first', () => {
  const proxies = parseTrustedProxies(['127.0.0.1', '10.0.0.2']);
  assert.equal(clientAddress('127.0.0.1', '198.51.100.7', proxies), '198.51.100.7');
  assert.equal(clientAddress('::ffff:127.0.0.1', '198.51.100.7', proxies), '198.51.100.7', 'IPv4-mapped peer');
  // The client may send its own header: only what the trusted proxies appended counts.
  assert.equal(clientAddress('127.0.0.1', '203.0.113.9, 198.51.100.7, 10.0.0.2', proxies), '198.51.100.7');
  assert.equal(clientAddress('192.0.2.1', '198.51.100.7', proxies), '192.0.2.1', 'an untrusted peer is the client');
  assert.equal(clientAddress('127.0.0.1', undefined, proxies), '127.0.0.1', 'no header: the proxy itself');
  assert.equal(clientAddress('127.0.0.1', '198.51.100.7', noTrustedProxies), '127.0.0.1', 'nothing trusted by default');
  // One spelling per client: the IPv4 peer of a dual-stack listener, and hops some proxies write with a port.
  assert.equal(clientAddress('::ffff:192.0.2.1', undefined, noTrustedProxies), '192.0.2.1');
  assert.equal(clientAddress('127.0.0.1', '198.51.100.7:5678', proxies), '198.51.100.7');
  assert.equal(clientAddress('127.0.0.1', '[2001:db8::7]:443', proxies), '2001:db8::7');
  assert.equal(clientAddress('127.0.0.1', '198.51.100.7, 10.0.0.2:8080', proxies), '198.51.100.7', 'a trusted hop with a port is still trusted');
  assert.equal(clientAddress('127.0.0.1', '::ffff:198.51.100.7', proxies), '198.51.100.7');
  assert.equal(clientAddress('2001:db8::1', undefined, noTrustedProxies), '2001:db8::1', 'an IPv6 address keeps its colons');
  // However the proxy writes it: upper case or uncompressed, IPv4-mapped in hex, with a zone.
  assert.equal(clientAddress('127.0.0.1', '2001:DB8:0:0:0:0:0:5', proxies), '2001:db8::5');
  assert.equal(clientAddress('127.0.0.1', '::ffff:cb00:7109', proxies), '203.0.113.9');
  assert.equal(clientAddress('127.0.0.1', 'fe80::1%eth0', proxies), 'fe80::1');
  // A hop that is no address (`unknown`, or anything a client put there): the address is not known.
  assert.equal(clientAddress('127.0.0.1', '198.51.100.7, unknown', proxies), undefined);
  assert.equal(clientAddress('127.0.0.1', '<script>alert(1)</script>', proxies), undefined);
  assert.equal(clientAddress('127.0.0.1', '<script>, 198.51.100.7', proxies), '198.51.100.7', 'what the trusted proxies appended');
});

test('trusted proxies match by address, not by spelling, and may be CIDR ranges', () => {
  const proxies = parseTrustedProxies(['::FFFF:10.0.0.2', '2001:DB8:0::1', '172.17.0.0/16', 'fd00::/8']);
  assert.equal(clientAddress('10.0.0.2', '198.51.100.7', proxies), '198.51.100.7', 'an IPv4-mapped entry matches the IPv4 peer');
  assert.equal(clientAddress('2001:db8::1', '198.51.100.7', proxies), '198.51.100.7', 'IPv6 in another case and compression');
  assert.equal(clientAddress('::ffff:172.17.3.4', '198.51.100.7', proxies), '198.51.100.7', 'inside an IPv4 range, IPv4-mapped peer');
  assert.equal(clientAddress('fd12::5', '198.51.100.7', proxies), '198.51.100.7', 'inside an IPv6 range');
  assert.equal(clientAddress('172.18.0.1', '198.51.100.7', proxies), '172.18.0.1', 'outside the range');
  assert.equal(clientAddress('172.17.0.1', '198.51.100.7, 172.17.0.9', proxies), '198.51.100.7', 'hops inside the range are proxies too');
  assert.equal(clientAddress('172.17.0.1', 'unknown', proxies), undefined, 'a hop that is no address is not trusted, nor an address');
  for (const bad of ['proxy.local', '10.0.0.0/33', '10.0.0.0/8/1', 'fd00::/129', '10.0.0.0/']) {
    assert.throws(() => parseTrustedProxies([bad]), new RegExp(JSON.stringify(bad).replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')));
  }
});

test('an open through a trusted proxy records the forwarded address', async () => {
  const proxied = await startAppliance({
    env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DELIVERY_MODE: 'capture', POSTINO_HTTP_TRUSTED_PROXIES: '127.0.0.1,::1' },
  });
  try {
    const res = await proxied.api('POST', '/v1/email/send', { ...baseEmail, html: '<p>hi</p>' });
    const id = res.body.id;
    let pixel: string | undefined;
    for (let i = 0; i < 400 && !pixel; i++) {
      const captured = await proxied.api('GET', `/v1/captured/${id}`);
      if (captured.status === 200) pixel = /src="([^"]+\/t\/o\/[^"]+)"/.exec(String((await simpleParser(Buffer.from(captured.body as string))).html))?.[1];
      else await new Promise((resolve) => setTimeout(resolve, 25));
    }
    assert.ok(pixel, 'the message was captured with its pixel');
    await fetch(pixel, { headers: { 'x-forwarded-for': '198.51.100.7' } });
    const { email } = (await proxied.api('GET', `/v1/email/${id}`)).body;
    assert.deepEqual(email.events.filter((e: any) => e.type === 'open').map((e: any) => e.ipAddress), ['198.51.100.7']);
  } finally {
    await proxied.stop();
  }
});

test('with the disk full, the pixel still answers its gif and a click still redirects; the lost event is logged', async () => {
  const full = await startAppliance({
    env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_SENDING_CLICK_TRACKING: 'true', POSTINO_DELIVERY_MODE: 'capture', POSTINO_STORAGE_WRITER_THREAD: 'false' },
  });
  const sqlite = full.appliance.context.database.sqlite;
  try {
    const sent = await full.api('POST', '/v1/email/send', { ...baseEmail, text: undefined, html: '<body><a href="https://example.com/full">x</a></body>' });
    assert.equal(sent.status, 200);
    let html = '';
    await waitUntil(async () => {
      const res = await full.api('GET', `/v1/captured/${sent.body.id}`);
      if (res.status === 200) html = String((await simpleParser(Buffer.from(res.body as string))).html);
      return res.status === 200;
    }, 'the captured message');
    fillDisk(sqlite, sent.body.id, systemClock);
    const pixel = await fetch(/src="([^"]+\/t\/o\/[^"]+)"/.exec(html)![1]);
    assert.equal(pixel.status, 200);
    assert.equal(pixel.headers.get('content-type'), 'image/gif');
    const click = await fetch(/href="([^"]+\/t\/c\/[^"]+)"/.exec(html)![1], { redirect: 'manual' });
    assert.equal(click.status, 302);
    assert.equal(click.headers.get('location'), 'https://example.com/full');
    assert.equal(full.logs.filter((line) => /"level":"warn".*tracking event not recorded.*database or disk is full/.test(line)).length, 2, full.logs.join('\n'));
  } finally {
    freeDisk(sqlite);
    await full.stop();
  }
});
