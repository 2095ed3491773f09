import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, request } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { answerMalformedRequest, createHttpApp, startHttpServer } from '../../src/http/app.js';
import { createMetrics } from '../../src/http/metrics.js';
import { createRoutes } from '../../src/http/router.js';
import { createLogger } from '../../src/lib/logger.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { waitUntil } from '../helpers/wait-until.js';

let app: TestAppliance;
before(async () => {
  app = await startAppliance({ env: { POSTINO_HTTP_BODY_LIMIT_BYTES: '2048' } });
});
after(() => app.stop());

function assertErrorShape(body: any, code: string) {
  assert.deepEqual(Object.keys(body).sort(), ['developerMessage', 'errorCode', 'moreInfo']);
  assert.equal(body.errorCode, code);
}

test('unknown routes answer 404 not-found as JSON', async () => {
  for (const [method, path] of [['GET', '/v1/nothing-here'], ['POST', '/'], ['DELETE', '/v1/project/extra']]) {
    const res = await app.api(method, path);
    assert.equal(res.status, 404, `${method} ${path}`);
    assert.match(res.headers.get('content-type') ?? '', /application\/json/);
    assertErrorShape(res.body, 'not-found');
  }
});

test('a path that lacks /v1, or has it twice, is told which path was meant: SDKs differ on whether their base URL ends in /v1', async () => {
  // The Python, Ruby and PHP SDKs given http://host:8080 (their default base URL ends in /v1).
  const bare = await app.api('POST', '/email/send', {});
  assert.equal(bare.status, 404);
  assertErrorShape(bare.body, 'not-found');
  assert.match(bare.body.developerMessage, /^No route POST \/email\/send\. Did you mean \/v1\/email\/send\? API paths start with \/v1/);
  assert.match((await app.api('GET', '/templates/gallery')).body.developerMessage, /Did you mean \/v1\/templates\/gallery\?/);
  // The Node SDK given http://host:8080/v1 (it adds /v1/ itself).
  const twice = await app.api('GET', '/v1/v1/domains');
  assert.equal(twice.status, 404);
  assert.match(twice.body.developerMessage, /^No route GET \/v1\/v1\/domains\. Did you mean \/v1\/domains\? The base URL ends in \/v1 and the client adds \/v1 too/);
  // No hint where the path would not exist either way.
  assert.equal((await app.api('GET', '/v1/nothing-here')).body.developerMessage, 'No route GET /v1/nothing-here.');
  assert.equal((await app.api('GET', '/nothing-here')).body.developerMessage, 'No route GET /nothing-here.');
});

test('a known path asked with a method it does not take answers 405 with Allow (RFC 9110 §15.5.6), not 404 "No route" nor an email whose id is "search"', async () => {
  const cases: [string, string, string][] = [
    ['GET', '/v1/email/search', 'POST'],
    ['GET', '/v1/email/send', 'POST'],
    ['PUT', '/v1/email/send', 'POST'],
    ['DELETE', '/v1/email/search', 'POST'],
    ['OPTIONS', '/v1/email/send', 'POST'],
    ['DELETE', '/v1/domains', 'GET, HEAD, POST'],
    ['DELETE', '/v1/domains/', 'GET, HEAD, POST'],
    ['PUT', '/v1/templates/000000000000000000000000', 'GET, HEAD, PATCH, DELETE'],
    // A literal segment wins over a parameter, as in the router: gallery is not a template id.
    ['PATCH', '/v1/templates/gallery', 'GET, HEAD'],
    ['POST', '/v1/email/000000000000000000000000', 'GET, HEAD, DELETE'],
    ['POST', '/healthz', 'GET, HEAD'],
  ];
  for (const [method, path, allow] of cases) {
    const res = await app.api(method, path);
    assert.equal(res.status, 405, `${method} ${path}`);
    assert.equal(res.headers.get('allow'), allow, `${method} ${path}`);
    assert.match(res.headers.get('content-type') ?? '', /application\/json/);
    assertErrorShape(res.body, 'method-not-allowed');
    assert.equal(res.body.developerMessage, `${path} does not take ${method}; it takes ${allow}.`);
  }
  // Without a key too: which methods a path takes is no secret (the docs list them).
  assert.equal((await app.api('PUT', '/v1/email/send', undefined, { key: null })).status, 405);
  // A HEAD of a POST-only path: the status and Allow, no body.
  const head = await fetch(`${app.baseUrl}/v1/email/send`, { method: 'HEAD' });
  assert.equal(head.status, 405);
  assert.equal(head.headers.get('allow'), 'POST');
  // A path no route serves, whatever the method, is still 404; an id that is no email still {email: null}.
  for (const [method, path] of [['GET', '/v1/email/a/b'], ['DELETE', '/v1/automation/abc'], ['PUT', '/v1/contacts/a@b.com/x'], ['OPTIONS', '/v1/nothing']]) {
    const res = await app.api(method, path);
    assert.equal(res.status, 404, `${method} ${path}`);
    assert.equal(res.headers.get('allow'), null);
    assertErrorShape(res.body, 'not-found');
  }
  assert.deepEqual((await app.api('GET', '/v1/email/000000000000000000000000')).body, { email: null });
});

test('a base URL given with a trailing slash works: repeated slashes in the path are one', async () => {
  const res = await app.api('GET', '//v1//project');
  assert.equal(res.status, 200);
  assert.equal(res.body.name, 'Default project');
  // Only the path: the query keeps what it says.
  const search = await app.api('POST', '//v1/email/search?limit=1', {});
  assert.equal(search.status, 200);
  assert.ok(search.body.data.length <= 1);
});

test('a request target in absolute form (http://host/path, as sent through a forward proxy) is routed by its path, as RFC 9112 §3.2.2 requires', async () => {
  const rawAnswer = async (target: string) => {
    const socket = connect(app.appliance.httpPort, '127.0.0.1');
    await once(socket, 'connect');
    socket.end(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${app.apiKey}\r\nConnection: close\r\n\r\n`);
    let answer = '';
    for await (const chunk of socket) answer += chunk;
    return { status: Number(answer.split(' ')[1]), body: JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) };
  };
  // It used to be answered 404 "No route GET http:/127.0.0.1:…/v1/project".
  const project = await rawAnswer(`http://127.0.0.1:${app.appliance.httpPort}/v1/project`);
  assert.equal(project.status, 200);
  assert.equal(project.body.name, 'Default project');
  // The scheme and host in any case; the query is kept; no path at all is `/`.
  assert.equal((await rawAnswer(`HTTPS://mail.example.com/v1/domains?x=1`)).status, 200);
  assert.equal((await rawAnswer(`http://mail.example.com?x=1`)).body.developerMessage, 'No route GET /.');
});

test('every answer forbids content sniffing (X-Content-Type-Options: nosniff): a JSON answer quoting user text is never read as html', async () => {
  const answers = [
    await fetch(`${app.baseUrl}/healthz`),
    await fetch(`${app.baseUrl}/v1/project`, { headers: { authorization: `Bearer ${app.apiKey}` } }),
    await fetch(`${app.baseUrl}/v1/project`),
    await fetch(`${app.baseUrl}/v1/nothing-here`),
    await fetch(`${app.baseUrl}/v1/email/send`, { method: 'HEAD' }),
  ];
  for (const answer of answers) assert.equal(answer.headers.get('x-content-type-options'), 'nosniff', answer.url);
});

test('malformed JSON answers 400 parameters-invalid', async () => {
  const res = await app.api('PATCH', '/v1/project', '{"name": ');
  assert.equal(res.status, 400);
  assertErrorShape(res.body, 'parameters-invalid');
  assert.match(res.body.developerMessage, /not valid JSON/);
});

test('a body that is no JSON, sent as a form or XML, is told that the API takes JSON; JSON under another label is still read', async () => {
  const post = async (body: string | FormData, headers: Record<string, string> = {}) => {
    const res = await fetch(`${app.baseUrl}/v1/email/send`, { method: 'POST', headers: { authorization: `Bearer ${app.apiKey}`, ...headers }, body });
    return { status: res.status, body: await res.json() };
  };
  const form = new FormData();
  form.set('toAddress', 'bob@example.com');
  // A multipart body was "not valid JSON: No number after minus sign in JSON at position 1", no more.
  const multipart = await post(form);
  assert.equal(multipart.status, 400);
  assertErrorShape(multipart.body, 'parameters-invalid');
  assert.match(multipart.body.developerMessage, /^Request body is not valid JSON: .*\. It was sent as multipart\/form-data: the API takes a JSON body, sent with Content-Type: application\/json$/);
  const urlencoded = await post('toAddress=bob%40example.com', { 'content-type': 'application/x-www-form-urlencoded' });
  assert.match(urlencoded.body.developerMessage, /It was sent as application\/x-www-form-urlencoded: the API takes a JSON body/);
  assert.match((await post('<email/>', { 'content-type': 'application/xml; charset=utf-8' })).body.developerMessage, /It was sent as application\/xml:/);
  // Sent as JSON (or unlabelled, or text/plain), the parser's words are enough.
  for (const headers of [{ 'content-type': 'application/json' }, { 'content-type': 'text/plain' }, { 'content-type': 'application/vnd.api+json' }]) {
    assert.doesNotMatch((await post('{"toAddress": ', headers)).body.developerMessage, /It was sent as/, JSON.stringify(headers));
  }
  // JSON labelled as a form (curl -d without -H) is read as JSON, as before.
  const labelled = await post('{"toAddress": "nobody"}', { 'content-type': 'application/x-www-form-urlencoded' });
  assert.equal(labelled.body.errorCode, 'to-address-invalid');
});

test('a body that is not a JSON object where one is expected is said in words, on every endpoint, not as zod\'s "body: expected object, received undefined"', async () => {
  const cases: [string, string, string | undefined, string][] = [
    ['POST', '/v1/templates', undefined, 'the request has no body'],
    ['PATCH', '/v1/templates/000000000000000000000000', undefined, 'the request has no body'],
    ['POST', '/v1/domains', 'null', 'it is null'],
    ['PATCH', '/v1/project', '[1]', 'it is an array'],
    ['POST', '/v1/templates', '"T1"', 'it is a string'],
    ['POST', '/v1/domains', '42', 'it is a number'],
    // The sends and the search said it already, without what came instead.
    ['POST', '/v1/email/send', undefined, 'the request has no body'],
    ['POST', '/v1/mail/send', '[{}]', 'it is an array'],
    ['POST', '/v1/email/search', '"x"', 'it is a string'],
  ];
  for (const [method, path, body, received] of cases) {
    const res = await app.api(method, path, body);
    assert.equal(res.status, 400, `${method} ${path} ${body}`);
    assertErrorShape(res.body, 'parameters-invalid');
    assert.equal(res.body.developerMessage, `Invalid body: expected a JSON object, but ${received}.`);
  }
  assert.equal((await app.api('POST', '/v1/email/send', '[7]')).body.developerMessage, 'Invalid batch item 0: expected a JSON object, but it is a number.');
  // A field's own type error still names the field.
  assert.match((await app.api('POST', '/v1/domains', { domain: 42 })).body.developerMessage, /^Invalid body\. domain: /);
});

test('a required field that is missing is said to be required, not "expected string, received undefined"', async () => {
  const missing = await app.api('POST', '/v1/templates', {});
  assert.equal(missing.status, 400);
  assertErrorShape(missing.body, 'parameters-invalid');
  assert.equal(missing.body.developerMessage, 'Invalid body. name: is required (a string); subject: is required (a string)');
  // A value of the wrong type still says what came.
  assert.equal((await app.api('POST', '/v1/templates', { name: 1, subject: 'x' })).body.developerMessage, 'Invalid body. name: Invalid input: expected string, received number');
  // Inside template content too, where a node's field is missing: a text node without its text, a button without its label and url.
  const node = await app.api('POST', '/v1/templates', { name: 'Nodes', subject: 'x', content: [{ type: 'text' }, { type: 'button', text: 'Go' }] });
  assert.equal(node.status, 400);
  assertErrorShape(node.body, 'parameters-invalid');
  assert.equal(node.body.developerMessage, 'Invalid template content: content[0].text: is required (a string); content[1].label: is required (a string); content[1].url: is required (a string).');
});

test('a rule of the whole body is said of the body, not of a field called "body"', async () => {
  // It read "Invalid body. body: give at least one of …".
  const empty = await app.api('PATCH', '/v1/project', {});
  assert.equal(empty.status, 400);
  assert.equal(empty.body.developerMessage, 'Invalid body: give at least one of name, emailTemplateDesign');
  const created = await app.api('POST', '/v1/templates', { name: 'Whole body rule', subject: 'x' });
  assert.match((await app.api('PATCH', `/v1/templates/${created.body.data.id}`, { unknown: 1 })).body.developerMessage, /^Invalid body: give at least one of name, subject, /);
});

test('validation messages name the field and the rule', async () => {
  const res = await app.api('POST', '/v1/project', { name: 42 });
  assert.equal(res.status, 400);
  assert.match(res.body.developerMessage, /name: .*string/i);
  const unknown = await app.api('PATCH', '/v1/project', { emailTemplateDesign: { colour: 'red' } });
  assert.equal(unknown.status, 400);
  assert.match(unknown.body.developerMessage, /colour/);
  // Inside a group too: { colors: { primary } } was answered 200 and changed nothing.
  for (const design of [{ colors: { primary: '#ff0000' } }, { logo: { width: 120 } }, { font: { family: 'Inter' } }]) {
    const misspelt = await app.api('PATCH', '/v1/project', { emailTemplateDesign: design });
    assert.equal(misspelt.status, 400, JSON.stringify(design));
    assert.match(misspelt.body.developerMessage, new RegExp(Object.keys(Object.values(design)[0])[0]));
  }
});

test('a body over the configured limit answers 413 payload-too-large', async () => {
  const res = await app.api('PATCH', '/v1/project', { name: 'x'.repeat(5000) });
  assert.equal(res.status, 413);
  assertErrorShape(res.body, 'payload-too-large');

  // A chunked body (no Content-Length) is cut off as soon as it passes the limit.
  const chunked = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(`${app.baseUrl}/v1/project`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${app.apiKey}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
    });
    req.on('response', (response) => {
      let body = '';
      response.on('data', (c) => (body += c));
      response.on('end', () => resolve({ status: response.statusCode!, body }));
    });
    req.on('error', reject);
    for (let i = 0; i < 10; i++) req.write(`"${'y'.repeat(500)}"`);
    req.end();
  });
  assert.equal(chunked.status, 413);
  assert.equal(JSON.parse(chunked.body).errorCode, 'payload-too-large');
});

test('an unexpected exception answers a generic 500 without internals, and is logged', async () => {
  const lines: string[] = [];
  const log = createLogger({ level: 'debug', write: (line) => lines.push(line) });
  const metrics = createMetrics();
  const routes = createRoutes({ authenticate: () => ({ id: 'p1', parentId: null }), log, metrics, bodyLimitBytes: 1024 });
  routes.get('/boom', () => {
    throw new Error('database password is hunter2');
  });
  const server = await startHttpServer(createHttpApp(routes, { log, metrics }), '127.0.0.1', 0);
  try {
    const res = await fetch(`http://127.0.0.1:${server.port}/boom`, { headers: { authorization: 'Bearer x' } });
    assert.equal(res.status, 500);
    const body = await res.json();
    assertErrorShape(body, 'internal-error');
    assert.doesNotMatch(JSON.stringify(body), /hunter2|at .*\.ts/);
    assert.ok(lines.some((line) => line.includes('unhandled error') && line.includes('hunter2')), 'logged with detail');
  } finally {
    await server.close();
  }
});

test('percent-encoded path parameters are decoded; broken encoding is a 400', async () => {
  const log = createLogger({ level: 'silent' });
  const metrics = createMetrics();
  const routes = createRoutes({ authenticate: () => ({ id: 'p1', parentId: null }), log, metrics, bodyLimitBytes: 1024 });
  routes.get('/echo/:value', ({ params }) => ({ value: params.value }));
  const server = await startHttpServer(createHttpApp(routes, { log, metrics }), '127.0.0.1', 0);
  try {
    const get = async (path: string) => (await fetch(`http://127.0.0.1:${server.port}${path}`, { headers: { authorization: 'Bearer x' } })).json();
    assert.equal((await get('/echo/a%40b.com')).value, 'a@b.com');
    assert.equal((await get('/echo/a@b.com')).value, 'a@b.com');
    assert.equal((await get('/echo/a+tag%40b.com')).value, 'a+tag@b.com');
    assert.equal((await get('/echo/%E0%A4%A')).errorCode, 'parameters-invalid');
  } finally {
    await server.close();
  }
});

test("requests Node's HTTP parser refuses answer the compatible JSON error too", async () => {
  const rawExchange = async (request: string) => {
    const socket = connect(app.appliance.httpPort, '127.0.0.1');
    await once(socket, 'connect');
    socket.end(request);
    let answer = '';
    for await (const chunk of socket) answer += chunk;
    const [head, body] = answer.split('\r\n\r\n');
    return { status: Number(head.split(' ')[1]), head, body: JSON.parse(body) };
  };
  const cases: [string, number, string][] = [
    ['GARBAGE\r\n\r\n', 400, 'parameters-invalid'],
    ['GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n', 400, 'parameters-invalid'],
    [`GET /v1/email/${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 431, 'payload-too-large'],
    [`POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;${'a'.repeat(20_000)}\r\nx\r\n0\r\n\r\n`, 413, 'payload-too-large'],
    // A proxy's method: Node hands the socket over, and closed it without a word when nothing took it.
    ['CONNECT /v1/project HTTP/1.1\r\nHost: x\r\n\r\n', 405, 'method-not-allowed'],
    // Node decodes chunked only: the gzip bytes were read as the JSON ("not valid UTF-8").
    [`PATCH /v1/project HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.apiKey}\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`, 415, 'unsupported-media-type'],
  ];
  for (const [request, status, code] of cases) {
    const answer = await rawExchange(request);
    assert.equal(answer.status, status, request.slice(0, 40));
    assert.match(answer.head, /content-type: application\/json/i);
    assert.match(answer.head, /x-content-type-options: nosniff/i);
    assertErrorShape(answer.body, code);
  }
});

test('an error that quotes what the client sent quotes at most 100 characters of it: a 5 MB key made a 5 MB error', async () => {
  const key = 'k'.repeat(1_500); // under this file's 2 kB body limit; the rule is the same for megabytes
  const call = (method: string, path: string, body: unknown) => app.api(method, path, body);
  const answers = [
    await call('POST', '/v1/email/search', { query: { [key]: 1 } }),
    await call('POST', '/v1/contacts/query', { [key]: 1 }),
    await call('PATCH', '/v1/project', { emailTemplateDesign: { [key]: 1 } }),
    await call('POST', '/v1/email/send', { toAddress: 'a@example.com', fromAddress: 'b@example.com', subject: 's', text: 't', headers: { [key]: 'v' } }),
  ];
  for (const answer of answers) {
    assert.ok(answer.status >= 400 && answer.status < 500, JSON.stringify(answer.body).slice(0, 300));
    assert.ok(answer.body.developerMessage.length < 1_000, answer.body.developerMessage.slice(0, 300));
    assert.match(answer.body.developerMessage, /k{100}…/);
  }
});

test('a refused request closes the connection even when the client keeps its side open', async () => {
  // The appliance's handler on a bare HTTP server, whose open connections can be counted.
  const server = createServer(() => {});
  server.on('clientError', answerMalformedRequest);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  // allowHalfOpen: this client does not answer the server's FIN with its own, as a careless or hostile one.
  const socket = connect({ port: (server.address() as AddressInfo).port, host: '127.0.0.1', allowHalfOpen: true });
  try {
    await once(socket, 'connect');
    socket.write('GARBAGE\r\n\r\n');
    let answer = '';
    socket.on('data', (chunk) => (answer += chunk));
    await once(socket, 'end');
    assert.match(answer, /^HTTP\/1\.1 400 /);
    const openConnections = () => new Promise<number>((resolve, reject) => server.getConnections((error, count) => (error ? reject(error) : resolve(count))));
    await waitUntil(async () => (await openConnections()) === 0, 'the server side of the connection closed', 3000);
  } finally {
    socket.destroy();
    server.close();
  }
});

test('headers that do not arrive in time are answered 408 request-timeout, in the compatible shape', async () => {
  const server = createServer({ headersTimeout: 300, requestTimeout: 300, connectionsCheckingInterval: 50 }, () => {});
  server.on('clientError', answerMalformedRequest);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const socket = connect({ port: (server.address() as AddressInfo).port, host: '127.0.0.1' });
  try {
    await once(socket, 'connect');
    socket.write('POST /v1/email/send HTTP/1.1\r\nHost: x\r\n'); // and nothing more
    let answer = '';
    socket.on('data', (chunk) => (answer += chunk));
    await once(socket, 'close');
    assert.match(answer, /^HTTP\/1\.1 408 Request Timeout\r\n/);
    assertErrorShape(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)), 'request-timeout');
  } finally {
    socket.destroy();
    server.close();
  }
});

test('a client that hangs up in the middle of its body is logged as such, not as an unhandled error', async () => {
  const socket = connect(app.appliance.httpPort, '127.0.0.1');
  await once(socket, 'connect');
  socket.write(`POST /v1/email/send HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.apiKey}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"toAddress":`);
  await new Promise((resolve) => setTimeout(resolve, 100));
  socket.destroy();
  await waitUntil(() => app.logs.some((line) => line.includes('request abandoned by the client')), 'the abandoned request logged');
  assert.ok(!app.logs.some((line) => line.includes('unhandled error') && line.includes('closed the connection')));
});

test('a request whose body is still arriving when the stop cuts it (3 s after SIGTERM) is logged as cut by the stop, not as abandoned by its client', async () => {
  const stopping = await startAppliance();
  const socket = connect(stopping.appliance.httpPort, '127.0.0.1');
  await once(socket, 'connect');
  socket.on('error', () => {});
  socket.write(`POST /v1/email/send HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${stopping.apiKey}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"toAddress":`);
  await new Promise((resolve) => setTimeout(resolve, 100));
  await stopping.stop();
  socket.destroy();
  // Its handler hears of the cut as the connection closes, a moment after the stop returned.
  await waitUntil(() => stopping.logs.some((line) => line.includes('request cut by the stop')), 'the cut request logged');
  assert.ok(!stopping.logs.some((line) => line.includes('request abandoned by the client')));
});

test('a request on an idle keep-alive socket as the server stops is answered (Connection: close), not reset', async () => {
  const log = createLogger({ level: 'silent' });
  const metrics = createMetrics();
  const routes = createRoutes({ authenticate: () => ({ id: 'p1', parentId: null }), log, metrics, bodyLimitBytes: 1024 });
  routes.public('get', '/ping', () => ({ pong: true }));
  const server = await startHttpServer(createHttpApp(routes, { log, metrics }), '127.0.0.1', 0);
  const socket = connect(server.port, '127.0.0.1');
  await once(socket, 'connect');
  let received = '';
  socket.on('data', (chunk) => (received += chunk.toString()));
  const request = 'GET /ping HTTP/1.1\r\nHost: x\r\n\r\n';
  socket.write(request);
  await waitUntil(() => received.includes('{"pong":true}'), 'the first answer');
  assert.match(received, /connection: keep-alive/i);
  received = '';
  const closed = server.close();
  // The client had sent its next request just as the server began to stop.
  socket.write(request);
  await once(socket, 'close');
  await closed;
  assert.match(received, /^HTTP\/1\.1 200 OK/);
  assert.match(received, /connection: close/i);
  assert.match(received, /\{"pong":true\}$/);
});

test('an idle keep-alive connection outlives the idle timeout of the proxies in front of the API (nginx, AWS ALB: 60 s), as it says in Keep-Alive', async () => {
  // A proxy that reuses a connection the API has just closed gets a reset, and answers 502 for a send it
  // cannot retry. The API used to close idle connections after 5 s.
  const keepAliveOf = (res: Response) => Number(/timeout=(\d+)/.exec(res.headers.get('keep-alive') ?? '')?.[1]);
  const res = await fetch(`${app.baseUrl}/healthz`);
  await res.arrayBuffer();
  assert.ok(keepAliveOf(res) > 60, `keep-alive: ${res.headers.get('keep-alive')}`);
  assert.equal(app.config.http.keep_alive_timeout, 65_000);

  // Behind a proxy with a longer idle timeout, it is set above that one.
  const longer = await startAppliance({ env: { POSTINO_HTTP_KEEP_ALIVE_TIMEOUT: '130s' } });
  try {
    const answer = await fetch(`${longer.baseUrl}/healthz`);
    await answer.arrayBuffer();
    assert.equal(keepAliveOf(answer), 130);
  } finally {
    await longer.stop();
  }
});

test('a body the server cannot read as sent is refused clearly: Content-Encoding 415, an unknown charset 415, bytes that are not UTF-8 400; a declared charset is honoured', async () => {
  const { gzipSync } = await import('node:zlib');
  const post = (body: Buffer | string, headers: Record<string, string>) =>
    fetch(`${app.baseUrl}/v1/project`, { method: "PATCH", headers: { authorization: `Bearer ${app.apiKey}`, ...headers }, body: typeof body === "string" ? body : new Uint8Array(body) }).then(async (res) => ({ status: res.status, body: await res.json(), acceptEncoding: res.headers.get('accept-encoding') }));
  // A gzipped body used to be parsed as it came: 400 "not valid JSON" quoting binary bytes.
  const gzipped = await post(gzipSync('{"name":"zipped"}'), { 'content-type': 'application/json', 'content-encoding': 'gzip' });
  assert.equal(gzipped.status, 415);
  assertErrorShape(gzipped.body, 'unsupported-media-type');
  assert.match(gzipped.body.developerMessage, /Content-Encoding gzip/);
  // RFC 9110 §15.5.16: the 415 says which coding it takes (it said nothing, so a client could not fall back).
  assert.equal(gzipped.acceptEncoding, 'identity');
  // Labelled deflate but plain: accepted before, as if the label meant nothing.
  assert.equal((await post('{"name":"plain"}', { 'content-type': 'application/json', 'content-encoding': 'deflate' })).status, 415);
  assert.equal((await post('{"name":"plain"}', { 'content-type': 'application/json', 'content-encoding': 'identity' })).status, 200);
  // Latin-1 bytes used to become U+FFFD, stored and answered 200.
  const latin1 = await post(Buffer.from('{"name":"caf\xe9"}', 'latin1'), { 'content-type': 'application/json; charset=ISO-8859-1' });
  assert.equal(latin1.status, 200);
  assert.equal(latin1.body.name, 'café');
  const unknown = await post('{"name":"x"}', { 'content-type': 'application/json; charset=klingon' });
  assert.equal(unknown.status, 415);
  assertErrorShape(unknown.body, 'unsupported-media-type');
  // A charset is no content coding: no Accept-Encoding there.
  assert.equal(unknown.acceptEncoding, null);
  const broken = await post(Buffer.from('{"name":"caf\xe9"}', 'latin1'), { 'content-type': 'application/json' });
  assert.equal(broken.status, 400);
  assertErrorShape(broken.body, 'parameters-invalid');
  assert.match(broken.body.developerMessage, /UTF-8/);
  assert.equal((await post('{"name":"Default project"}', { 'content-type': 'application/json; charset="UTF-8"' })).status, 200);
});

test('Expect: 100-continue: a request refused before its body is read gets its error, not "100 Continue" and an upload; an accepted one gets 100 when its body is read', async () => {
  const exchange = async (head: string, body?: string) => {
    const socket = connect(app.appliance.httpPort, '127.0.0.1');
    await once(socket, 'connect');
    let received = '';
    socket.on('data', (chunk) => (received += chunk));
    socket.write(head);
    await waitUntil(() => /^HTTP\/1\.1 \d+/.test(received), 'a first answer');
    const first = received;
    if (body !== undefined && first.startsWith('HTTP/1.1 100')) socket.write(body);
    await waitUntil(() => /\r\n\r\n[^]*\{[^]*\}$/.test(received) && !received.endsWith('\r\n\r\n'), 'a final answer');
    socket.destroy();
    return { first, received };
  };
  const big = `POST /v1/email/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.apiKey}\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 999999\r\n\r\n`;
  const tooLarge = await exchange(big);
  assert.match(tooLarge.first, /^HTTP\/1\.1 413 /);
  assert.match(tooLarge.first, /connection: close/i);
  const badKey = await exchange(`POST /v1/email/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n`);
  assert.match(badKey.first, /^HTTP\/1\.1 401 /);
  assert.match(badKey.first, /connection: close/i);
  const ok = await exchange(`POST /v1/email/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.apiKey}\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n`, '{"limit":1}');
  assert.match(ok.first, /^HTTP\/1\.1 100 Continue\r\n\r\n/);
  assert.match(ok.received, /HTTP\/1\.1 200 OK[^]*"data":/);
});

test('requests Node answers itself before any handler (no Host in HTTP/1.1, an unknown Expect) get the compatible JSON too', async () => {
  const exchange = async (request: string) => {
    const socket = connect(app.appliance.httpPort, '127.0.0.1');
    await once(socket, 'connect');
    let received = '';
    socket.on('data', (chunk) => (received += chunk));
    socket.write(request);
    await waitUntil(() => /\r\n\r\n[^]*\}$/.test(received), 'an answer with a JSON body');
    socket.destroy();
    const [head, body] = [received.slice(0, received.indexOf('\r\n\r\n')), received.slice(received.indexOf('\r\n\r\n') + 4)];
    return { status: Number(head.split(' ')[1]), head, body: JSON.parse(body) };
  };
  const noHost = await exchange('GET /healthz HTTP/1.1\r\n\r\n');
  assert.equal(noHost.status, 400);
  assert.match(noHost.head, /content-type: application\/json/i);
  assert.match(noHost.head, /connection: close/i);
  assert.match(noHost.head, /x-content-type-options: nosniff/i);
  assertErrorShape(noHost.body, 'parameters-invalid');
  assert.match(noHost.body.developerMessage, /Host/);
  // HTTP/1.0 has no Host requirement.
  assert.equal((await exchange('GET /healthz HTTP/1.0\r\n\r\n')).status, 200);
  // An expectation other than 100-continue is ignored (RFC 9110 §10.1.1 allows it), not a bare 417.
  const expect = await exchange(`POST /v1/email/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.apiKey}\r\nContent-Type: application/json\r\nExpect: something-else\r\nContent-Length: 2\r\n\r\n{}`);
  assert.equal(expect.status, 200);
  assert.ok(Array.isArray(expect.body.data));
});

test('a body over the limit is answered 413 as soon as it passes it, and a client that keeps sending is cut off, not read for minutes', async () => {
  const head = (extra: string) => `PATCH /v1/project HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.apiKey}\r\nContent-Type: application/json\r\n${extra}\r\n`;
  const open = async () => {
    const socket = connect(app.appliance.httpPort, '127.0.0.1');
    await once(socket, 'connect');
    const state = { received: '', closed: false, socket };
    socket.on('data', (chunk) => (state.received += chunk));
    socket.on('close', () => (state.closed = true));
    socket.on('error', () => {});
    return state;
  };
  // Chunked, never finished: the 413 came only once the body ended (never), the server reading meanwhile.
  const chunked = await open();
  chunked.socket.write(head('Transfer-Encoding: chunked\r\n') + `c00\r\n"${'y'.repeat(3070)}"\r\n`);
  await waitUntil(() => chunked.received.startsWith('HTTP/1.1 413 '), 'a 413 while the body is still on its way', 3000);
  chunked.socket.destroy();
  // A declared size far over the limit, sent anyway: the server drained all of it (GBs) on a kept connection.
  for (const extra of ['Content-Length: 100000000000\r\n', 'Transfer-Encoding: chunked\r\n']) {
    const flood = await open();
    flood.socket.write(head(extra));
    const piece = Buffer.alloc(65536, 'a');
    const chunk = extra.startsWith('Transfer') ? Buffer.concat([Buffer.from('10000\r\n'), piece, Buffer.from('\r\n')]) : piece;
    const deadline = Date.now() + 5000;
    while (!flood.closed && Date.now() < deadline) {
      if (!flood.socket.write(chunk)) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const closed = flood.closed;
    flood.socket.destroy();
    assert.ok(closed, `${extra.trim()}: the connection is closed once the client has sent far more than the limit`);
    assert.match(flood.received, /^HTTP\/1\.1 413 /);
  }
  // A client that sends its whole body before it reads (as many do), a little over the limit, still reads its 413.
  const eager = await open();
  eager.socket.write(head('Content-Length: 3002\r\n') + `{"name":"${'z'.repeat(2990)}"}`);
  await waitUntil(() => /\r\n\r\n\{[^]*\}$/.test(eager.received), 'the whole 413 answer', 3000);
  assert.match(eager.received, /^HTTP\/1\.1 413 /);
  eager.socket.destroy();
});

test('null on an optional field that cannot be null is not sent, on templates, project and Messenger alike (PHP and Java clients write unset options as null)', async () => {
  const created = await app.api('POST', '/v1/templates', { name: 'Nulls as absent', subject: 's', content: null });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  assert.deepEqual(created.body.data.content, []);
  const id = created.body.data.id;
  const renamed = await app.api('PATCH', `/v1/templates/${id}`, { name: null, subject: 's2', content: null });
  assert.equal(renamed.status, 200, JSON.stringify(renamed.body));
  const read = await app.api('GET', `/v1/templates/${id}`);
  assert.equal(read.body.data.name, 'Nulls as absent', 'name unchanged');
  assert.equal(read.body.data.subject, 's2');
  assert.equal((await app.api('PATCH', `/v1/templates/${id}`, { name: null })).body.developerMessage.startsWith('Invalid body: give at least one of'), true, 'only nulls: nothing to change');
  assert.equal((await app.api('POST', '/v1/templates', { name: null, subject: 's' })).status, 400, 'a required field stays required');

  const project = await app.api('PATCH', '/v1/project', { name: null, emailTemplateDesign: { unsubscribeText: 'Bye' } });
  assert.equal(project.status, 200, JSON.stringify(project.body));
  const tooLong = await app.api('POST', '/v1/project', { name: 'x'.repeat(201) });
  assert.equal(tooLong.body.developerMessage, 'Invalid body. name: must be at most 200 characters');
});

test('Messenger: PHP\'s [] creates a draft as {} does; an empty PATCH is refused as on the other endpoints, where it answered {} and changed nothing', async () => {
  const created = await app.api('POST', '/v1/messenger', '[]');
  assert.equal(created.status, 200, JSON.stringify(created.body));
  const empty = await app.api('PATCH', `/v1/messenger/${created.body.id}`, {});
  assert.equal(empty.status, 400);
  assertErrorShape(empty.body, 'parameters-invalid');
  assert.match(empty.body.developerMessage, /^Invalid body: give at least one of subject, fromName, /);
  assert.equal((await app.api('PATCH', `/v1/messenger/${created.body.id}`, { id: created.body.id })).status, 400, 'read-only fields alone change nothing');
  assert.equal((await app.api('PATCH', `/v1/messenger/${created.body.id}`, { subject: 'Hello' })).status, 200);
  assert.equal((await app.api('POST', '/v1/messenger', '"draft"')).body.developerMessage, 'Invalid body: expected a JSON object, but it is a string.');
});

test('both cursors of the received-email list are refused, as email search refuses them; a bad ?limit of a contacts query is named in the query', async () => {
  const cursor = 'a'.repeat(24);
  const both = await app.api('GET', `/v1/inbound/emails?paginationCursorNext=${cursor}&paginationCursorPrev=${cursor}`);
  assert.equal(both.status, 400);
  assert.match(both.body.developerMessage, /paginationCursorPrev: give one cursor/);
  assert.equal((await app.api('GET', `/v1/inbound/emails?paginationCursorPrev=${cursor}`)).status, 200);
  const badLimit = await app.api('POST', '/v1/contacts/query?limit=abc', {});
  assert.equal(badLimit.body.developerMessage, 'Invalid query. limit: must be a whole number from 1 to 100');
  assert.equal((await app.api('POST', '/v1/contacts/query?limit=abc', { limit: 2 })).status, 200, 'the body wins over the query string');
});
