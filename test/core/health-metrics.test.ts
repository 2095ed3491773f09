import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startAppliance } from '../helpers/appliance.js';

test('healthz reports version, uptime and every component once all are up', async () => {
  const app = await startAppliance({ env: { POSTINO_SCHEDULER_ENABLED: 'true' } });
  try {
    const res = await app.api('GET', '/healthz', undefined, { key: null });
    assert.equal(res.status, 200);
    assert.equal(res.body.status, 'ok');
    assert.match(res.body.version, /^\d+\.\d+\.\d+/);
    assert.equal(typeof res.body.uptimeSeconds, 'number');
    for (const component of ['http', 'smtp', 'worker', 'scheduler']) assert.equal(res.body.components[component], 'up', component);
    // HEAD, as monitors probe: the GET's status and headers, no body. Authenticated reads answer it too.
    const head = await fetch(`${app.baseUrl}/healthz`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.match(head.headers.get('content-type') ?? '', /application\/json/);
    assert.equal(await head.text(), '');
    assert.equal((await fetch(`${app.baseUrl}/v1/project`, { method: 'HEAD', headers: { authorization: `Bearer ${app.apiKey}` } })).status, 200);
    assert.equal((await fetch(`${app.baseUrl}/v1/project`, { method: 'HEAD' })).status, 401);
  } finally {
    await app.stop();
  }
});

test('a scheduler turned off is reported as disabled (healthy), with a warning at boot that scheduled mail waits', async () => {
  const app = await startAppliance({ env: { POSTINO_SCHEDULER_ENABLED: 'false' } });
  try {
    const res = await app.api('GET', '/healthz', undefined, { key: null });
    assert.equal(res.status, 200);
    assert.equal(res.body.components.scheduler, 'disabled');
    assert.ok(app.logs.some((line) => /"level":"warn".*scheduler\.enabled is false: scheduled emails stay scheduled/.test(line)), app.logs.join('\n'));
  } finally {
    await app.stop();
  }
});

test('metrics serve Prometheus text with request counts and latency by route and status', async () => {
  const app = await startAppliance();
  try {
    await app.api('GET', '/v1/project');
    await app.api('GET', '/v1/project', undefined, { key: null });
    await app.api('GET', '/v1/unknown');
    const res = await fetch(`${app.baseUrl}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/plain/);
    const text = await res.text();
    // HEAD as /healthz answers it: monitors probing with `curl -I` got 404.
    const head = await fetch(`${app.baseUrl}/metrics`, { method: 'HEAD' });
    assert.deepEqual([head.status, head.headers.get('content-type'), await head.text()], [200, res.headers.get('content-type'), '']);
    assert.match(text, /postino_http_requests_total\{method="GET",route="\/v1\/project",status="200"\} 1/);
    assert.match(text, /postino_http_requests_total\{method="GET",route="\/v1\/project",status="401"\} 1/);
    assert.match(text, /postino_http_requests_total\{method="GET",route="unmatched",status="404"\} 1/);
    assert.match(text, /postino_http_request_duration_seconds_bucket\{le="0.005",method="GET",route="\/v1\/project"\} \d+/);
    assert.match(text, /postino_process_resident_memory_bytes/);
  } finally {
    await app.stop();
  }
});

test('with http.metrics_token set, /metrics answers only that bearer token: no project\'s API key reads every project\'s counts', async () => {
  const token = 'metrics-scrape-token-0123456789';
  const app = await startAppliance({ env: { POSTINO_HTTP_METRICS_TOKEN: token } });
  try {
    const linked = await app.api('POST', '/v1/project', { name: 'Tenant' });
    const cases: [Record<string, string>, number, string | undefined][] = [
      [{}, 401, 'authentication-required'],
      [{ authorization: `Basic ${Buffer.from(`x:${token}`).toString('base64')}` }, 401, 'authentication-invalid'],
      [{ authorization: `Bearer ${app.apiKey}` }, 401, 'authentication-failed'],
      [{ authorization: `Bearer ${linked.body.apiKey}` }, 401, 'authentication-failed'],
      [{ authorization: `Bearer ${token}x` }, 401, 'authentication-failed'],
      [{ authorization: `Bearer ${token}` }, 200, undefined],
    ];
    for (const [headers, status, code] of cases) {
      const res = await fetch(`${app.baseUrl}/metrics`, { headers });
      assert.equal(res.status, status, JSON.stringify(headers));
      if (code) {
        assert.match(res.headers.get('content-type') ?? '', /application\/json/);
        const body = await res.json();
        assert.equal(body.errorCode, code);
        assert.equal(typeof body.developerMessage, 'string');
        assert.equal(typeof body.moreInfo, 'string');
      } else {
        assert.match(await res.text(), /postino_http_requests_total/);
      }
    }
    // /healthz stays open: load balancers probe it without credentials, and it names no project.
    assert.equal((await app.api('GET', '/healthz', undefined, { key: null })).status, 200);
  } finally {
    await app.stop();
  }
});

test('access logs are one JSON line per request without keys or bodies; monitor probes only at debug', async () => {
  const app = await startAppliance({ env: { POSTINO_LOG_LEVEL: 'info' } });
  try {
    await app.api('GET', '/healthz', undefined, { key: null });
    await app.api('GET', '/metrics', undefined, { key: null });
    await app.api('PATCH', '/v1/project', { name: 'Secret Name 123' });
    const requestLines = app.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'request');
    const patch = requestLines.find((entry) => entry.method === 'PATCH');
    assert.ok(patch, 'PATCH logged');
    assert.equal(patch.route, '/v1/project');
    assert.equal(patch.status, 200);
    assert.equal(typeof patch.ms, 'number');
    assert.equal(patch.projectId, app.appliance.defaultProjectId);
    assert.deepEqual(requestLines.filter((entry) => entry.route === '/healthz' || entry.route === '/metrics'), []);
    const all = app.logs.join('\n');
    assert.doesNotMatch(all, new RegExp(app.apiKey));
    assert.doesNotMatch(all, /Secret Name 123/);
  } finally {
    await app.stop();
  }
});
