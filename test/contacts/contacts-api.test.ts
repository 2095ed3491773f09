import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ManualClock } from '../../src/lib/clock.js';
import { startAppliance, type ApiResponse, type TestAppliance } from '../helpers/appliance.js';

/**
 * Contacts (spec §2.9, §4.5; COMPAT.md "Contacts"): create-or-update, find, list, query, delete, through
 * the real appliance. Each test works in a linked project of its own, so one appliance serves the file.
 */
let app: TestAppliance;
const clock = new ManualClock('2026-01-15T12:00:00.000Z');

before(async () => {
  app = await startAppliance({ clock });
});
after(async () => {
  await app?.stop();
});

/** A fresh linked project and calls made with its key. */
async function project() {
  const created = await app.api('POST', '/v1/project', { name: `contacts ${Math.random()}` });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  const key: string = created.body.apiKey;
  return (method: string, path: string, body?: unknown) => app.api(method, path, body, { key });
}

function assertInvalid(res: ApiResponse, field: RegExp, what = '') {
  assert.equal(res.status, 400, `${what} ${JSON.stringify(res.body)}`);
  assert.equal(res.body.errorCode, 'parameters-invalid', what);
  assert.match(res.body.developerMessage, field, what);
}

describe('create or update', () => {
  test('a new address is created, the same one again updated; find answers the contact object of spec §2.9', async () => {
    const call = await project();
    const created = await call('POST', '/v1/contacts', { emailAddress: 'marry@lightning.com', identifier: '123', customProps: { name: 'Marry Lightning', visits: 3 } });
    assert.equal(created.status, 200);
    assert.deepEqual(created.body, { status: 'created' });
    const found = (await call('GET', '/v1/contacts/marry@lightning.com')).body.contact;
    assert.match(found.id, /^[0-9a-f]{24}$/);
    assert.deepEqual(
      { ...found, id: undefined, projectId: undefined },
      {
        id: undefined,
        projectId: undefined,
        emailAddress: 'marry@lightning.com',
        identifier: '123',
        createdAt: '2026-01-15T12:00:00.000Z',
        updatedAt: '2026-01-15T12:00:00.000Z',
        timezone: null,
        timezoneUtcOffset: null,
        isSubscribed: true,
        subscribedAt: '2026-01-15T12:00:00.000Z',
        unsubscribedAt: null,
        sourceType: 'api',
        groups: [],
        customProps: [
          { keyName: 'name', value: 'Marry Lightning', updatedAt: '2026-01-15T12:00:00.000Z' },
          { keyName: 'visits', value: 3, updatedAt: '2026-01-15T12:00:00.000Z' },
        ],
        note: null,
      },
    );
    assert.deepEqual((await call('POST', '/v1/contacts', { emailAddress: 'Marry@Lightning.com' })).body, { status: 'updated' }, 'one contact per address, whatever its case');
    const listed = (await call('GET', '/v1/contacts')).body.data;
    assert.equal(listed.length, 1);
    assert.equal(listed[0].emailAddress, 'Marry@Lightning.com', 'the address as last written');
  });

  test('the path address may come raw or percent-encoded, with + in its local part, in any case (COMPAT.md)', async () => {
    const call = await project();
    await call('POST', '/v1/contacts', { emailAddress: 'ann+news@example.com' });
    for (const path of ['ann+news@example.com', 'ann%2Bnews%40example.com', 'ANN+News@Example.COM']) {
      assert.equal((await call('GET', `/v1/contacts/${path}`)).body.contact?.emailAddress, 'ann+news@example.com', path);
    }
    assert.deepEqual((await call('GET', '/v1/contacts/nobody@example.com')).body, { contact: null });
    // An IDN domain is stored in A-labels and found in either form, as the suppression list does.
    assert.deepEqual((await call('POST', '/v1/contacts', { emailAddress: 'anna@bücher.example' })).body, { status: 'created' });
    assert.equal((await call('GET', `/v1/contacts/${encodeURIComponent('Anna@Bücher.example')}`)).body.contact?.emailAddress, 'anna@xn--bcher-kva.example');
    assert.deepEqual((await call('DELETE', '/v1/contacts/anna@xn--bcher-kva.example')).body, { deleted: true });
  });

  test('with an identifier the contact that carries it changes its address; a taken address or another identifier is resource-duplicate (403)', async () => {
    const call = await project();
    await call('POST', '/v1/contacts', { emailAddress: 'old@example.com', identifier: 'user-1' });
    assert.deepEqual((await call('POST', '/v1/contacts', { emailAddress: 'new@example.com', identifier: 'user-1' })).body, { status: 'updated' });
    assert.deepEqual((await call('GET', '/v1/contacts/old@example.com')).body, { contact: null });
    assert.equal((await call('GET', '/v1/contacts/new@example.com')).body.contact.identifier, 'user-1');
    // Without an identifier a new address is a new contact (spec §4.5).
    assert.deepEqual((await call('POST', '/v1/contacts', { emailAddress: 'old@example.com' })).body, { status: 'created' });

    const taken = await call('POST', '/v1/contacts', { emailAddress: 'old@example.com', identifier: 'user-1' });
    assert.equal(taken.status, 403, JSON.stringify(taken.body));
    assert.equal(taken.body.errorCode, 'resource-duplicate');
    assert.match(taken.body.developerMessage, /old@example\.com/);
    const rekey = await call('POST', '/v1/contacts', { emailAddress: 'new@example.com', identifier: 'user-2' });
    assert.equal(rekey.status, 403);
    assert.match(rekey.body.developerMessage, /another identifier \(user-1\)/);
    // A contact without an identifier takes the one sent.
    assert.deepEqual((await call('POST', '/v1/contacts', { emailAddress: 'old@example.com', identifier: 'user-3' })).body, { status: 'updated' });
    assert.equal((await call('GET', '/v1/contacts/old@example.com')).body.contact.identifier, 'user-3');
  });

  test('customProps merge: a value sent replaces, null removes, others stay; an unchanged value keeps its updatedAt', async () => {
    const call = await project();
    await call('POST', '/v1/contacts', { emailAddress: 'p@example.com', customProps: { plan: 'pro', seats: 5, city: 'Brno' } });
    clock.advance(60_000);
    await call('POST', '/v1/contacts', { emailAddress: 'p@example.com', customProps: { plan: 'pro', seats: 6, city: null } });
    const contact = (await call('GET', '/v1/contacts/p@example.com')).body.contact;
    assert.deepEqual(contact.customProps, [
      { keyName: 'plan', value: 'pro', updatedAt: '2026-01-15T12:00:00.000Z' },
      { keyName: 'seats', value: 6, updatedAt: '2026-01-15T12:01:00.000Z' },
    ]);
    assert.equal(contact.updatedAt, '2026-01-15T12:01:00.000Z');
    clock.set('2026-01-15T12:00:00.000Z');
  });

  test('a property holds one data type: its first value fixes it, another type is parameters-invalid and changes nothing', async () => {
    const call = await project();
    await call('POST', '/v1/contacts', { emailAddress: 'a@example.com', customProps: { seats: 5 } });
    assertInvalid(await call('POST', '/v1/contacts', { emailAddress: 'b@example.com', customProps: { seats: 'five' } }), /customProps\.seats: must be a number/);
    assert.deepEqual((await call('GET', '/v1/contacts/b@example.com')).body, { contact: null }, 'nothing stored');
    assert.equal((await call('POST', '/v1/contacts', { emailAddress: 'b@example.com', customProps: { seats: 7, label: 'x' } })).status, 200);
    assertInvalid(await call('POST', '/v1/contacts', { emailAddress: 'c@example.com', customProps: { label: 3 } }), /customProps\.label: must be a string/);
  });

  test('isSubscribed: created subscribed by default; a change records when, a repeat does not', async () => {
    const call = await project();
    await call('POST', '/v1/contacts', { emailAddress: 's@example.com' });
    clock.advance(1_000);
    await call('POST', '/v1/contacts', { emailAddress: 's@example.com', isSubscribed: false });
    clock.advance(1_000);
    await call('POST', '/v1/contacts', { emailAddress: 's@example.com', isSubscribed: false });
    let contact = (await call('GET', '/v1/contacts/s@example.com')).body.contact;
    assert.deepEqual([contact.isSubscribed, contact.subscribedAt, contact.unsubscribedAt], [false, '2026-01-15T12:00:00.000Z', '2026-01-15T12:00:01.000Z']);
    clock.advance(1_000);
    await call('POST', '/v1/contacts', { emailAddress: 's@example.com', isSubscribed: true });
    contact = (await call('GET', '/v1/contacts/s@example.com')).body.contact;
    assert.deepEqual([contact.isSubscribed, contact.subscribedAt, contact.unsubscribedAt], [true, '2026-01-15T12:00:03.000Z', null]);
    await call('POST', '/v1/contacts', { emailAddress: 'u@example.com', isSubscribed: false });
    contact = (await call('GET', '/v1/contacts/u@example.com')).body.contact;
    assert.deepEqual([contact.isSubscribed, contact.subscribedAt, contact.unsubscribedAt], [false, null, '2026-01-15T12:00:03.000Z']);
    clock.set('2026-01-15T12:00:00.000Z');
  });

  test('timezone: an IANA name (any case), its UTC offset derived at read time with daylight time; null clears it', async () => {
    const call = await project();
    await call('POST', '/v1/contacts', { emailAddress: 'tz@example.com', timezone: 'america/new_york' });
    let contact = (await call('GET', '/v1/contacts/tz@example.com')).body.contact;
    assert.deepEqual([contact.timezone, contact.timezoneUtcOffset], ['America/New_York', -300]);
    clock.set('2026-07-15T12:00:00.000Z');
    contact = (await call('GET', '/v1/contacts/tz@example.com')).body.contact;
    assert.equal(contact.timezoneUtcOffset, -240, 'EDT in July');
    await call('POST', '/v1/contacts', { emailAddress: 'tz@example.com', timezone: 'Asia/Kolkata' });
    contact = (await call('GET', '/v1/contacts/tz@example.com')).body.contact;
    assert.deepEqual([contact.timezone, contact.timezoneUtcOffset], ['Asia/Kolkata', 330], 'the current name, not ICU\'s old Asia/Calcutta');
    await call('POST', '/v1/contacts', { emailAddress: 'tz@example.com', timezone: null, note: 'VIP' });
    contact = (await call('GET', '/v1/contacts/tz@example.com')).body.contact;
    assert.deepEqual([contact.timezone, contact.timezoneUtcOffset, contact.note], [null, null, 'VIP']);
  });

  test('a query rule on timezoneUtcOffset (spec §2.9 lists it as a property) compares the offset at the time of the query, daylight time included', async () => {
    const call = await project();
    for (const [address, timezone] of [['ny@example.com', 'America/New_York'], ['prague@example.com', 'Europe/Prague'], ['kolkata@example.com', 'Asia/Kolkata'], ['none@example.com', null]]) {
      await call('POST', '/v1/contacts', { emailAddress: address, timezone });
    }
    const matching = async (rules: unknown[]) => ((await call('POST', '/v1/contacts/query', { filter: { rules } })).body.data as any[]).map((c) => c.emailAddress).sort();
    clock.set('2026-01-15T12:00:00.000Z');
    assert.deepEqual(await matching([{ field: 'timezoneUtcOffset', operator: 'equals', value: 60 }]), ['prague@example.com']);
    assert.deepEqual(await matching([{ field: 'timezoneUtcOffset', operator: 'lt', value: 0 }]), ['ny@example.com']);
    assert.deepEqual(await matching([{ field: 'timezoneUtcOffset', operator: 'in', value: [330, -300] }]), ['kolkata@example.com', 'ny@example.com']);
    assert.deepEqual(await matching([{ field: 'timezoneUtcOffset', operator: 'noValue' }]), ['none@example.com']);
    clock.set('2026-07-15T12:00:00.000Z');
    assert.deepEqual(await matching([{ field: 'timezoneUtcOffset', operator: 'equals', value: 120 }]), ['prague@example.com'], 'CEST in July');
    const refused = await call('POST', '/v1/contacts/query', { filter: { rules: [{ field: 'timezoneUtcOffset', operator: 'includes', value: '1' }] } });
    assert.match(refused.body.developerMessage, /operator: includes does not apply to timezoneUtcOffset/);
    clock.set('2026-01-15T12:00:00.000Z');
    // Every operator, as the contact objects' own offsets say (a contact without a zone has none: it is
    // equal, less or greater than nothing, and not equal to anything).
    const offsets: Record<string, number | null> = { 'ny@example.com': -300, 'prague@example.com': 60, 'kolkata@example.com': 330, 'none@example.com': null };
    const expected = (test: (offset: number | null) => boolean) => Object.keys(offsets).filter((address) => test(offsets[address]!)).sort();
    const cases: [Record<string, unknown>, (offset: number | null) => boolean][] = [
      [{ operator: 'notEquals', value: 60 }, (o) => o !== 60],
      [{ operator: 'gt', value: 60 }, (o) => o !== null && o > 60],
      [{ operator: 'gte', value: '60' }, (o) => o !== null && o >= 60],
      [{ operator: 'lte', value: 60 }, (o) => o !== null && o <= 60],
      [{ operator: 'notIn', value: '330, -300' }, (o) => o !== 330 && o !== -300],
      [{ operator: 'anyValue' }, (o) => o !== null],
      [{ operator: 'equals', value: 45 }, () => false],
    ];
    for (const [rule, test] of cases) assert.deepEqual(await matching([{ field: 'timezoneUtcOffset', ...rule }]), expected(test), JSON.stringify(rule));
    // Rules of any number, combined with others, in one query: each decided zone by zone (one pass).
    const many = Array.from({ length: 49 }, (_, i) => ({ field: 'timezoneUtcOffset', operator: 'notEquals', value: 1000 + i }));
    assert.deepEqual(await matching([...many, { field: 'emailAddress', operator: 'includes', value: 'k' }]), ['kolkata@example.com']);
    // A zone this Node does not know (a row written under a newer ICU) has no offset, as the contact shows it: not 0.
    await call('POST', '/v1/contacts', { emailAddress: 'future@example.com', timezone: 'Europe/London' });
    const { id } = (await call('GET', '/v1/contacts/future@example.com')).body.contact;
    app.appliance.context.database.sqlite.prepare(`update contacts set timezone = 'America/Nowhere_New' where id = ?`).run(id);
    assert.equal((await call('GET', '/v1/contacts/future@example.com')).body.contact.timezoneUtcOffset, null);
    assert.deepEqual(await matching([{ field: 'timezoneUtcOffset', operator: 'equals', value: 0 }]), []);
    assert.deepEqual(await matching([{ field: 'timezoneUtcOffset', operator: 'noValue' }]), ['future@example.com', 'none@example.com']);
  });

  test('groups: a set of group ids, replaced when sent, kept when not', async () => {
    const call = await project();
    await call('POST', '/v1/contacts', { emailAddress: 'g@example.com', groups: ['beta', 'vip', 'beta'] });
    assert.deepEqual((await call('GET', '/v1/contacts/g@example.com')).body.contact.groups, ['beta', 'vip']);
    await call('POST', '/v1/contacts', { emailAddress: 'g@example.com', customProps: { a: 'b' } });
    assert.deepEqual((await call('GET', '/v1/contacts/g@example.com')).body.contact.groups, ['beta', 'vip']);
    await call('POST', '/v1/contacts', { emailAddress: 'g@example.com', groups: [] });
    assert.deepEqual((await call('GET', '/v1/contacts/g@example.com')).body.contact.groups, []);
  });

  test('every rule of the body: one accepted and one refused value each, refused as parameters-invalid naming the field', async () => {
    const call = await project();
    const cases: [string, Record<string, unknown>, Record<string, unknown>, RegExp][] = [
      ['emailAddress', { emailAddress: 'ok@example.com' }, { emailAddress: 'not an address' }, /emailAddress: must be a valid ASCII email address/],
      ['emailAddress missing', { emailAddress: 'ok@example.com' }, { emailAddress: undefined, identifier: 'x' }, /emailAddress: is required \(a string\)/],
      ['emailAddress type', { emailAddress: 'ok@example.com' }, { emailAddress: 42 }, /emailAddress: Invalid input: expected string, received number/],
      ['identifier', { identifier: 'id-1' }, { identifier: '' }, /identifier: must not be empty/],
      ['identifier length', { identifier: 'i'.repeat(200) }, { identifier: 'i'.repeat(201) }, /identifier/],
      ['isSubscribed', { isSubscribed: false }, { isSubscribed: 'no' }, /isSubscribed: must be true or false/],
      ['timezone', { timezone: 'Europe/Prague' }, { timezone: 'Mars/Olympus' }, /timezone: must be an IANA time zone name/],
      ['timezone offset', { timezone: 'UTC' }, { timezone: '+02:00' }, /timezone/],
      ['customProps value', { customProps: { n: 1 } }, { customProps: { flag: true } }, /customProps\.flag: must be a string, a number or null/],
      ['customProps key', { customProps: { 'First name': 'Ann' } }, { customProps: { 'say "hi"': 'x' } }, /customProps: keys must be 1 to 100 printable characters/],
      ['customProps __proto__', { customProps: { proto: 'x' } }, JSON.parse('{"customProps": {"__proto__": "x"}}'), /customProps\.__proto__: is not accepted as a key/],
      ['customProps string length', { customProps: { bio: 'b'.repeat(10_000) } }, { customProps: { bio: 'b'.repeat(10_001) } }, /customProps\.bio/],
      ['groups', { groups: ['a'] }, { groups: 'a' }, /groups/],
      ['group id', { groups: ['a'] }, { groups: ['   '] }, /groups\[0\]: must not be empty/],
      ['note', { note: 'line one\nline two' }, { note: 'bell\u0007' }, /note: must not contain control characters/],
    ];
    for (const [what, accepted, refused, message] of cases) {
      const ok = await call('POST', '/v1/contacts', { emailAddress: `${what.replace(/\W/g, '')}@example.com`, ...accepted });
      assert.equal(ok.status, 200, `${what} accepted: ${JSON.stringify(ok.body)}`);
      assertInvalid(await call('POST', '/v1/contacts', { emailAddress: `refused@example.com`, ...refused }), message, what);
    }
    assert.deepEqual((await call('GET', '/v1/contacts/refused@example.com')).body, { contact: null }, 'no refused body stored anything');
    assertInvalid(await call('POST', '/v1/contacts'), /expected a JSON object, but the request has no body/);
  });
});

describe('list, query and delete', () => {
  test('GET /v1/contacts: newest first, 100 a page by default, paginationCursorNext to the end; an empty query string works', async () => {
    const call = await project();
    for (let i = 0; i < 105; i++) await call('POST', '/v1/contacts', { emailAddress: `c${i}@example.com` });
    const first = await call('GET', '/v1/contacts?');
    assert.equal(first.status, 200);
    assert.equal(first.body.data.length, 100);
    assert.equal(first.body.hasMore, true);
    assert.equal(first.body.data[0].emailAddress, 'c104@example.com');
    const second = (await call('GET', `/v1/contacts?paginationCursorNext=${first.body.paginationCursorNext}`)).body;
    assert.deepEqual(second.data.map((c: any) => c.emailAddress), ['c4@example.com', 'c3@example.com', 'c2@example.com', 'c1@example.com', 'c0@example.com']);
    // The last page has a cursor too, and it leads to an empty page (spec §4.5: "empty data when none remain").
    assert.deepEqual([second.hasMore, second.paginationCursorNext], [false, second.data[4].id]);
    const past = (await call('GET', `/v1/contacts?paginationCursorNext=${second.paginationCursorNext}`)).body;
    assert.deepEqual(past, { hasMore: false, paginationCursorNext: null, data: [] });
    const small = (await call('GET', '/v1/contacts?limit=2')).body;
    assert.equal(small.data.length, 2);
    assertInvalid(await call('GET', '/v1/contacts?paginationCursorNext=bogus'), /paginationCursorNext/);
    assertInvalid(await call('GET', '/v1/contacts?limit=101'), /limit: must be a whole number from 1 to 100/);
  });

  test('DELETE /v1/contacts/{emailAddress} deletes permanently: {deleted: true}, then {deleted: false}; another project keeps its own', async () => {
    const call = await project();
    const other = await project();
    await call('POST', '/v1/contacts', { emailAddress: 'gone@example.com' });
    await other('POST', '/v1/contacts', { emailAddress: 'gone@example.com', identifier: 'theirs' });
    assert.deepEqual((await call('DELETE', '/v1/contacts/gone%40example.com')).body, { deleted: true });
    assert.deepEqual((await call('DELETE', '/v1/contacts/gone@example.com')).body, { deleted: false });
    assert.deepEqual((await call('GET', '/v1/contacts/gone@example.com')).body, { contact: null });
    assert.equal((await other('GET', '/v1/contacts/gone@example.com')).body.contact.identifier, 'theirs');
  });

  describe('POST /v1/contacts/query', () => {
    let call: Awaited<ReturnType<typeof project>>;
    const emails = (res: ApiResponse) => {
      assert.equal(res.status, 200, JSON.stringify(res.body));
      return res.body.data.map((c: any) => c.emailAddress.split('@')[0]);
    };
    before(async () => {
      call = await project();
      const people = [
        { emailAddress: 'ann@alpha.com', customProps: { plan: 'pro', seats: 10, city: 'Brno' }, groups: ['vip', 'beta'], timezone: 'Europe/Prague' },
        { emailAddress: 'bob@beta.org', customProps: { plan: 'basic', seats: 2 }, groups: ['beta'], isSubscribed: false },
        { emailAddress: 'cyd@alpha.com', customProps: { plan: 'pro', seats: 25, city: '' }, groups: [] },
        { emailAddress: 'dee@gamma.net', customProps: {}, groups: ['vip'], identifier: 'd-1' },
      ];
      for (const person of people) {
        assert.equal((await call('POST', '/v1/contacts', person)).status, 200);
        clock.advance(60_000);
      }
      clock.set('2026-01-15T12:00:00.000Z');
    });

    test('no filter: every contact, newest first, with totalCount and pageCount; offset and limit page it', async () => {
      const all = await call('POST', '/v1/contacts/query', {});
      assert.deepEqual(emails(all), ['dee', 'cyd', 'bob', 'ann']);
      assert.deepEqual([all.body.totalCount, all.body.pageCount, all.body.hasMore], [4, 1, false]);
      const page = await call('POST', '/v1/contacts/query', { offset: 1, limit: 2 });
      assert.deepEqual(emails(page), ['cyd', 'bob']);
      assert.deepEqual([page.body.totalCount, page.body.pageCount, page.body.hasMore], [4, 2, true]);
      const past = await call('POST', '/v1/contacts/query', { offset: 10 });
      assert.deepEqual([emails(past), past.body.hasMore], [[], false]);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query')), ['dee', 'cyd', 'bob', 'ann'], 'no body at all');
      // COMPAT.md: paging may come in the query string; the body wins.
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query?offset=1&limit=2', {})), ['cyd', 'bob']);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query?offset=1&limit=2', { limit: 1 })), ['cyd']);
      assertInvalid(await call('POST', '/v1/contacts/query', [1]), /expected a JSON object, but it is an array/);
    });

    test('top-level filters: contactId, groupId, search, isSubscribed; combined by match all (default) or any', async () => {
      const all = (await call('POST', '/v1/contacts/query', {})).body.data;
      const idOf = (name: string) => all.find((c: any) => c.emailAddress.startsWith(name)).id;
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { contactId: idOf('bob') })), ['bob']);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { contactId: [idOf('ann'), idOf('dee')] })), ['dee', 'ann']);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { groupId: 'vip' })), ['dee', 'ann']);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { groupId: ['beta', 'vip'] })), ['dee', 'bob', 'ann']);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { search: 'ALPHA' })), ['cyd', 'ann'], 'partial address, any case');
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { isSubscribed: false })), ['bob']);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { search: 'alpha', groupId: 'vip' })), ['ann']);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { search: 'alpha', groupId: 'vip', match: 'any' })), ['dee', 'cyd', 'ann']);
      // An empty selection selects no one (it is not "no filter"); with match any, the other filters still count.
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { contactId: [] })), []);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { groupId: [] })), []);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { contactId: [], groupId: 'vip', match: 'any' })), ['dee', 'ann']);
    });

    test('every filter operator on text, number, date, boolean and groups fields', async () => {
      const rule = (field: string, operator: string, value?: unknown) => call('POST', '/v1/contacts/query', { filter: { rules: [{ field, operator, value }] } });
      const cases: [string, string, unknown, string[]][] = [
        ['customProps.plan', 'equals', 'pro', ['cyd', 'ann']],
        ['customProps.plan', 'notEquals', 'pro', ['dee', 'bob']],
        ['customProps.city', 'includes', 'rn', ['ann']],
        ['customProps.city', 'notIncludes', 'rn', ['dee', 'cyd', 'bob']],
        ['customProps.seats', 'gt', 10, ['cyd']],
        ['customProps.seats', 'gte', '10', ['cyd', 'ann']],
        ['customProps.seats', 'lt', 10, ['bob']],
        ['customProps.seats', 'lte', 10, ['bob', 'ann']],
        ['customProps.seats', 'in', [2, 25], ['cyd', 'bob']],
        ['customProps.plan', 'in', 'basic, pro', ['cyd', 'bob', 'ann']],
        ['customProps.plan', 'notIn', ['basic'], ['dee', 'cyd', 'ann']],
        ['customProps.city', 'anyValue', undefined, ['ann']],
        ['customProps.city', 'noValue', null, ['dee', 'cyd', 'bob']],
        ['customProps.missing', 'noValue', '', ['dee', 'cyd', 'bob', 'ann']],
        ['emailAddress', 'equals', 'BOB@beta.org', ['bob']],
        ['emailAddress', 'includes', '@alpha', ['cyd', 'ann']],
        ['identifier', 'anyValue', undefined, ['dee']],
        ['timezone', 'equals', 'Europe/Prague', ['ann']],
        ['createdAt', 'gte', '2026-01-15T12:02:00.000Z', ['dee', 'cyd']],
        ['createdAt', 'lt', Date.parse('2026-01-15T12:01:00.000Z'), ['ann']],
        ['unsubscribedAt', 'anyValue', undefined, ['bob']],
        ['isSubscribed', 'equals', false, ['bob']],
        ['isSubscribed', 'notEquals', 'false', ['dee', 'cyd', 'ann']],
        ['groups', 'includes', 'beta', ['bob', 'ann']],
        ['groups', 'notIncludes', 'beta', ['dee', 'cyd']],
        ['groups', 'in', ['vip', 'none'], ['dee', 'ann']],
        ['groups', 'noValue', undefined, ['cyd']],
      ];
      for (const [field, operator, value, expected] of cases) {
        assert.deepEqual(emails(await rule(field, operator, value)), expected, `${field} ${operator} ${JSON.stringify(value)}`);
      }
      const equalsByDefault = await call('POST', '/v1/contacts/query', { filter: { rules: [{ field: 'customProps.plan', value: 'basic' }] } });
      assert.deepEqual(emails(equalsByDefault), ['bob'], 'operator defaults to equals');
    });

    test('rules combine by the filter\'s match; the filter combines with the top-level filters', async () => {
      const rules = [
        { field: 'customProps.plan', operator: 'equals', value: 'pro' },
        { field: 'groups', operator: 'includes', value: 'vip' },
      ];
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { filter: { rules } })), ['ann']);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { filter: { match: 'any', rules } })), ['dee', 'cyd', 'ann']);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { isSubscribed: true, filter: { match: 'any', rules } })), ['dee', 'cyd', 'ann']);
      assert.deepEqual(emails(await call('POST', '/v1/contacts/query', { search: 'gamma', filter: { match: 'any', rules } })), ['dee']);
    });

    test('a query that cannot mean anything is parameters-invalid, naming the part: never an empty or a full result', async () => {
      const cases: [unknown, RegExp][] = [
        [{ filter: { rules: [{ field: 'plan', value: 'pro' }] } }, /filter\.rules\[0\]\.field: "plan" is not a contact field; the fields are .*customProps\.<keyName>/],
        [{ filter: { rules: [{ field: 'constructor', value: 'x' }] } }, /filter\.rules\[0\]\.field: "constructor" is not a contact field/],
        [{ filter: { rules: [{ field: 'customProps.plan', operator: 'like', value: 'pro' }] } }, /filter\.rules\[0\]\.operator: must be one of equals, notEquals/],
        [{ filter: { rules: [{ field: 'customProps.seats', operator: 'includes', value: '1' }] } }, /filter\.rules\[0\]\.operator: includes does not apply to customProps\.seats/],
        [{ filter: { rules: [{ field: 'customProps.seats', operator: 'gt', value: 'many' }] } }, /filter\.rules\[0\]\.value: must be a number/],
        [{ filter: { rules: [{ field: 'createdAt', operator: 'gt', value: 'yesterday' }] } }, /filter\.rules\[0\]\.value: must be an ISO 8601 date/],
        [{ filter: { rules: [{ field: 'isSubscribed', value: 'maybe' }] } }, /filter\.rules\[0\]\.value: must be true or false/],
        [{ filter: { rules: [{ field: 'emailAddress', operator: 'equals' }] } }, /filter\.rules\[0\]\.value: must be a string \(this operator needs a value\)/],
        [{ filter: { rules: [{ field: 'customProps.a"b', value: 'x' }] } }, /filter\.rules\[0\]\.field: a custom property's name must be/],
        [{ filter: { rules: [{ value: 'x' }] } }, /filter\.rules\[0\]\.field: is required/],
        [{ filter: { match: 'some', rules: [] } }, /filter\.match: must be all or any/],
        [{ match: 'most' }, /match: must be all or any/],
        [{ isSubscribed: 'yes' }, /isSubscribed: must be true or false/],
        [{ limit: 0 }, /limit: must be a whole number from 1 to 100/],
        [{ limit: 101 }, /limit: must be a whole number from 1 to 100/],
        [{ offset: -1 }, /offset: must be a whole number from 0 to 1000000000/],
        [{ contactId: 5 }, /contactId: must be a string or an array/],
        [{ contactId: ['x'.repeat(101)] }, /contactId\[0\]: must have at most 100 characters/],
        [{ contactId: 'a\u0000b' }, /contactId: must not contain control characters/],
        [{ groupid: 'vip' }, /"groupid" is not a query field/],
        // in and notIn without a value selected no one, or every one (a broadcast to the whole list).
        ...[undefined, null, '', ' , ', []].flatMap((value): [unknown, RegExp][] =>
          (['in', 'notIn'] as const).map((operator) => [{ filter: { rules: [{ field: 'groups', operator, value }] } }, /filter\.rules\[0\]\.value: in and notIn need at least one value/]),
        ),
        [{ filter: { rules: [{ field: 'groups', operator: 'in', value: Array.from({ length: 101 }, (_, i) => `g${i}`).join(',') }] } }, /filter\.rules\[0\]\.value: in and notIn take at most 100 values/],
        [{ filter: { rules: [{ field: 'groups', operator: 'in', value: Array.from({ length: 101 }, (_, i) => `g${i}`) }] } }, /an array of at most 100 strings and numbers/],
        // An empty string is no value: as a rule's value, a missing one.
        [{ filter: { rules: [{ field: 'customProps.plan', operator: 'lt', value: '' }] } }, /filter\.rules\[0\]\.value: must not be empty/],
        // A number in a string is decimal; a date is ISO 8601 (on the calendar) or milliseconds.
        [{ filter: { rules: [{ field: 'customProps.seats', operator: 'equals', value: '0x5' }] } }, /filter\.rules\[0\]\.value: must be a number/],
        [{ filter: { rules: [{ field: 'customProps.seats', operator: 'equals', value: '5e0' }] } }, /filter\.rules\[0\]\.value: must be a number/],
        [{ filter: { rules: [{ field: 'createdAt', operator: 'gt', value: 'Tue, 01 Jan 2030 00:00:00 GMT' }] } }, /filter\.rules\[0\]\.value: must be an ISO 8601 date/],
        [{ filter: { rules: [{ field: 'createdAt', operator: 'gt', value: '2030-02-31T00:00:00Z' }] } }, /filter\.rules\[0\]\.value: must be an ISO 8601 date/],
      ];
      for (const [body, message] of cases) assertInvalid(await call('POST', '/v1/contacts/query', body), message, JSON.stringify(body));
    });

    test('what the differential test found: an empty string is no value for lt/lte, includes ignores ASCII case only, numbers and dates read as documented', async () => {
      const own = await project();
      for (const person of [
        { emailAddress: 'empty@q.test', customProps: { plan: '', city: 'ZÜRICH', n: 5 } },
        { emailAddress: 'none@q.test', customProps: { city: 'Zürich', n: -5 } },
        { emailAddress: 'val@q.test', customProps: { plan: 'b', city: 'zurich', n: 7.5 } },
      ]) {
        assert.equal((await own('POST', '/v1/contacts', person)).status, 200);
      }
      const names = async (rules: unknown[]) => emails(await own('POST', '/v1/contacts/query', { filter: { rules } })).sort();
      assert.deepEqual(await names([{ field: 'customProps.plan', operator: 'lt', value: 'z' }]), ['val']);
      assert.deepEqual(await names([{ field: 'customProps.plan', operator: 'lte', value: 'b' }]), ['val']);
      assert.deepEqual(await names([{ field: 'customProps.plan', operator: 'notEquals', value: 'b' }]), ['empty', 'none']);
      assert.deepEqual(await names([{ field: 'customProps.city', operator: 'includes', value: 'ZÜRICH' }]), ['empty'], 'a value includes itself; ü is not Ü');
      assert.deepEqual(await names([{ field: 'customProps.city', operator: 'includes', value: 'zurICH' }]), ['val'], 'ASCII case ignored');
      assert.deepEqual(await names([{ field: 'customProps.city', operator: 'notIncludes', value: 'ÜRICH' }]), ['none', 'val']);
      assert.deepEqual(await names([{ field: 'customProps.n', operator: 'equals', value: ' 5 ' }]), ['empty']);
      assert.deepEqual(await names([{ field: 'customProps.n', operator: 'in', value: '-5,7.5' }]), ['none', 'val']);
      // Milliseconds as digits in a string are a time, not a year ("12" was December 2001).
      assert.deepEqual(await names([{ field: 'createdAt', operator: 'gt', value: '12' }]), ['empty', 'none', 'val']);
      // A date-time without an offset is UTC, as everywhere in the API.
      assert.deepEqual(await names([{ field: 'createdAt', operator: 'lt', value: '2026-01-15T12:00:01' }]), ['empty', 'none', 'val']);
      assert.deepEqual(await names([{ field: 'createdAt', operator: 'gt', value: '2026-01-15T12:00:01' }]), []);
    });

    test('a rule names a zone or an IDN address in any spelling the contact API takes: a zone in any case, a domain in U-labels', async () => {
      const own = await project();
      assert.equal((await own('POST', '/v1/contacts', { emailAddress: 'eve@Bücher.example', timezone: 'europe/prague' })).status, 200);
      assert.equal((await own('POST', '/v1/contacts', { emailAddress: 'fay@plain.example', timezone: 'America/New_York' })).status, 200);
      // A zone ICU names otherwise (Asia/Calcutta) is kept as written, in whatever case.
      assert.equal((await own('POST', '/v1/contacts', { emailAddress: 'gus@plain.example', timezone: 'asia/kolkata' })).status, 200);
      const names = async (body: unknown) => emails(await own('POST', '/v1/contacts/query', body)).sort();
      assert.deepEqual(await names({ filter: { rules: [{ field: 'timezone', value: 'EUROPE/PRAGUE' }] } }), ['eve']);
      assert.deepEqual(await names({ filter: { rules: [{ field: 'timezone', value: 'Asia/Kolkata' }] } }), ['gus']);
      assert.deepEqual(await names({ filter: { rules: [{ field: 'timezone', operator: 'in', value: 'europe/prague,america/new_york' }] } }), ['eve', 'fay']);
      assert.deepEqual(await names({ filter: { rules: [{ field: 'emailAddress', value: 'eve@bücher.example' }] } }), ['eve']);
      assert.deepEqual(await names({ filter: { rules: [{ field: 'emailAddress', value: 'EVE@xn--bcher-kva.example' }] } }), ['eve']);
      assert.deepEqual(await names({ search: '@BÜCHER.example' }), ['eve']);
    });
  });
});
