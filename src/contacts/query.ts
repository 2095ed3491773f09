import { and, inArray, or, sql, type SQL } from 'drizzle-orm';
import { contacts } from '../db/schema/index.js';
import { invalid } from '../lib/errors.js';
import { withAsciiDomain } from '../emails/address.js';
import { calendarInstant } from '../lib/iso-date.js';
import { contactUtcOffset } from '../lib/time-zone.js';
import { contactLimits, isKeyName, keyNameRule, type ContactFilter, type FilterRule, type QueryContactsInput, type RuleOperator } from './schemas.js';

/**
 * The contact query engine (spec §4.5): top-level filters and an advanced filter of rules, turned into
 * one SQL condition over `contacts`, so counting and paging happen in SQLite. Messenger's recipients
 * (spec §2.10) are the same filters. Every value is a bound parameter; field names come from a closed
 * table, and a custom property's name is checked (schemas.ts isKeyName) before it becomes a JSON path.
 */

type FieldKind = 'text' | 'address' | 'number' | 'date' | 'boolean' | 'groups';

interface Field {
  kind: FieldKind;
  expression: SQL;
  /** The rule's text as the field stores it, when stored in one spelling of several (a zone's case). */
  spelling?: (text: string) => string;
}

/** The contact properties a rule may name (spec §2.9), besides `customProps.<keyName>`. */
const fields: Record<string, Field> = {
  id: { kind: 'text', expression: sql`${contacts.id}` },
  emailAddress: { kind: 'address', expression: sql`${contacts.emailKey}` },
  identifier: { kind: 'text', expression: sql`${contacts.identifier}` },
  // Zone names are ASCII and taken in any case when a contact is written (stored in ICU's spelling, or as
  // written where ICU's name is another: `asia/kolkata`), so a rule compares them without case.
  timezone: { kind: 'text', expression: sql`lower(${contacts.timezone})`, spelling: (zone) => zone.toLowerCase() },
  sourceType: { kind: 'text', expression: sql`${contacts.sourceType}` },
  note: { kind: 'text', expression: sql`${contacts.note}` },
  isSubscribed: { kind: 'boolean', expression: sql`${contacts.isSubscribed}` },
  createdAt: { kind: 'date', expression: sql`${contacts.createdAt}` },
  updatedAt: { kind: 'date', expression: sql`${contacts.updatedAt}` },
  subscribedAt: { kind: 'date', expression: sql`${contacts.subscribedAt}` },
  unsubscribedAt: { kind: 'date', expression: sql`${contacts.unsubscribedAt}` },
  groups: { kind: 'groups', expression: sql`${contacts.groups}` },
};
const fieldList = `${Object.keys(fields).join(', ')}, timezoneUtcOffset, customProps.<keyName>`;

/**
 * A rule on `timezoneUtcOffset` (minutes east of UTC at the query's time, daylight time included, as the
 * contact object shows it; none without a zone): decided for each zone the project's contacts have, in
 * JS, once, and asked of each contact as "is its zone one of these". A function of the offset called
 * for every contact took ~6 µs a row (ICU), and the event loop with it: one query of 50 such rules over
 * 100,000 contacts held every request for 31 s.
 */
function utcOffsetCondition(rule: FilterRule, context: QueryContext, path: string): SQL {
  if (rule.operator === 'anyValue' || rule.operator === 'noValue') return zonesWhere(context, rule.operator === 'anyValue' ? 'in' : 'not in', () => true);
  const number: Field = { kind: 'number', expression: sql`0` };
  if (rule.operator === 'in' || rule.operator === 'notIn') {
    const values = listOf(rule.value, `${path}.value`).map((value) => comparable(number, value, `${path}.value`));
    return zonesWhere(context, rule.operator === 'in' ? 'in' : 'not in', (offset) => values.includes(offset));
  }
  const value = comparable(number, rule.value, `${path}.value`) as number;
  const test: Record<string, (offset: number) => boolean> = {
    equals: (offset) => offset === value,
    // The contacts not among the equal ones: a contact without a zone is not equal to the value.
    notEquals: (offset) => offset === value,
    gt: (offset) => offset > value,
    gte: (offset) => offset >= value,
    lt: (offset) => offset < value,
    lte: (offset) => offset <= value,
  };
  return zonesWhere(context, rule.operator === 'notEquals' ? 'not in' : 'in', test[rule.operator]!);
}

/**
 * Contacts whose zone is (`in`), or is not (`not in`: those without a zone too), one of the project's
 * zones whose offset passes `test`: one bound JSON list, read once by SQLite.
 */
function zonesWhere(context: QueryContext, membership: 'in' | 'not in', test: (offset: number) => boolean): SQL {
  const zones = context.timeZones().filter((zone) => {
    const offset = contactUtcOffset(zone, context.nowMs);
    return offset !== null && test(offset);
  });
  const listed = sql`${contacts.timezone} in (select value from json_each(${JSON.stringify(zones)}))`;
  return membership === 'in' ? listed : sql`(${contacts.timezone} is null or not ${listed})`;
}

/** Which operators each kind of field takes; anything else is refused with the list. */
const operatorsOf: Record<FieldKind, readonly RuleOperator[]> = {
  text: ['equals', 'notEquals', 'includes', 'notIncludes', 'gt', 'gte', 'lt', 'lte', 'in', 'notIn', 'anyValue', 'noValue'],
  address: ['equals', 'notEquals', 'includes', 'notIncludes', 'gt', 'gte', 'lt', 'lte', 'in', 'notIn', 'anyValue', 'noValue'],
  number: ['equals', 'notEquals', 'gt', 'gte', 'lt', 'lte', 'in', 'notIn', 'anyValue', 'noValue'],
  date: ['equals', 'notEquals', 'gt', 'gte', 'lt', 'lte', 'anyValue', 'noValue'],
  boolean: ['equals', 'notEquals', 'anyValue', 'noValue'],
  groups: ['equals', 'notEquals', 'includes', 'notIncludes', 'in', 'notIn', 'anyValue', 'noValue'],
};

/** A custom property's data type, as fixed by its first value (contact_properties); unknown: undefined. */
export type PropertyTypes = (keyName: string) => 'string' | 'number' | undefined;

/** What reading a rule needs besides the rule: custom properties' types, and the time derived fields are computed at. */
export interface QueryContext {
  propertyType: PropertyTypes;
  nowMs: number;
  /** The time zones the project's contacts have (asked only by a rule on timezoneUtcOffset). */
  timeZones: () => string[];
}

/**
 * The whole query's condition; undefined matches every contact of the project. An empty `contactId` or
 * `groupId` list matches no contact: read as "no filter", a client's empty selection reached everyone.
 * `path` prefixes the fields errors name (a broadcast's are under `recipients.`).
 */
export function contactQueryCondition(input: Omit<QueryContactsInput, 'offset' | 'limit'>, context: QueryContext, path = ''): SQL | undefined {
  const parts: SQL[] = [];
  if (input.contactId) parts.push(input.contactId.length > 0 ? inArray(contacts.id, input.contactId) : sql`0`);
  if (input.groupId) parts.push(input.groupId.length > 0 ? inAnyGroup(input.groupId) : sql`0`);
  if (input.search) parts.push(sql`instr(${contacts.emailKey}, ${withAsciiDomain(input.search).toLowerCase()}) > 0`);
  if (input.isSubscribed !== undefined && input.isSubscribed !== null) parts.push(sql`${contacts.isSubscribed} = ${input.isSubscribed ? 1 : 0}`);
  if (input.filter && input.filter.rules.length > 0) parts.push(filterCondition(input.filter, context, `${path}filter`));
  if (parts.length === 0) return undefined;
  return input.match === 'any' ? or(...parts) : and(...parts);
}

/** spec §4.5 filter object: its rules, all (default) or any of them. */
export function filterCondition(filter: ContactFilter, context: QueryContext, path: string): SQL {
  const rules = filter.rules.map((rule, index) => ruleCondition(rule, context, `${path}.rules[${index}]`));
  if (rules.length === 0) return sql`1`;
  return (filter.match === 'any' ? or(...rules) : and(...rules))!;
}

function ruleCondition(rule: FilterRule, context: QueryContext, path: string): SQL {
  const field = resolveField(rule, context, path);
  if (!operatorsOf[field.kind].includes(rule.operator)) {
    throw invalid(`Invalid body. ${path}.operator: ${rule.operator} does not apply to ${rule.field}; use one of ${operatorsOf[field.kind].join(', ')}`);
  }
  if (rule.field === 'timezoneUtcOffset') return utcOffsetCondition(rule, context, path);
  if (rule.operator === 'anyValue' || rule.operator === 'noValue') return presence(field, rule.operator === 'anyValue');
  if (field.kind === 'groups') return groupCondition(rule, path);
  if (rule.operator === 'in' || rule.operator === 'notIn') {
    const values = listOf(rule.value, `${path}.value`).map((value) => comparable(field, value, `${path}.value`));
    const isListed = sql`${field.expression} in ${listed(values)}`;
    return rule.operator === 'in' ? isListed : sql`(${field.expression} is null or not ${isListed})`;
  }
  const value = comparable(field, rule.value, `${path}.value`);
  switch (rule.operator) {
    case 'equals':
      return sql`${field.expression} = ${value}`;
    case 'notEquals':
      // A contact without the field is not equal to the value.
      return sql`(${field.expression} is null or ${field.expression} != ${value})`;
    // SQLite's lower() folds A–Z only: the value is folded the same way, so ASCII case is ignored and
    // nothing else (`ZÜRICH` includes `zÜrich`, not `Zürich`), as documented.
    case 'includes':
      return sql`instr(lower(${field.expression}), ${asciiLowerCase(String(value))}) > 0`;
    case 'notIncludes':
      return sql`(${field.expression} is null or instr(lower(${field.expression}), ${asciiLowerCase(String(value))}) = 0)`;
    case 'gt':
      return sql`${field.expression} > ${value}`;
    case 'gte':
      return sql`${field.expression} >= ${value}`;
    // An empty string is no value (docs/contacts.md), and sorts below every text: not less than anything.
    case 'lt':
      return isText(field) ? sql`(${field.expression} != '' and ${field.expression} < ${value})` : sql`${field.expression} < ${value}`;
    default:
      return isText(field) ? sql`(${field.expression} != '' and ${field.expression} <= ${value})` : sql`${field.expression} <= ${value}`;
  }
}

const isText = (field: Field) => field.kind === 'text' || field.kind === 'address';

function asciiLowerCase(text: string): string {
  return text.replace(/[A-Z]+/g, (upper) => upper.toLowerCase());
}

/** A rule's field; `timezoneUtcOffset` is a number, compared zone by zone (utcOffsetCondition). */
const utcOffsetField: Field = { kind: 'number', expression: sql`null` };

function resolveField(rule: FilterRule, { propertyType }: QueryContext, path: string): Field {
  if (rule.field === 'timezoneUtcOffset') return utcOffsetField;
  if (rule.field.startsWith('customProps.')) {
    const keyName = rule.field.slice('customProps.'.length);
    if (!isKeyName(keyName)) throw invalid(`Invalid body. ${path}.field: a custom property's name ${keyNameRule}`);
    // A property no contact has yet has no type: the rule's own value says how to compare.
    const type = propertyType(keyName) ?? (typeof rule.value === 'number' ? 'number' : 'string');
    return { kind: type === 'number' ? 'number' : 'text', expression: sql`json_extract(${contacts.customProps}, ${`$."${keyName}".value`})` };
  }
  // Own keys only: `constructor` or `toString` must not find Object's.
  const field = Object.hasOwn(fields, rule.field) ? fields[rule.field] : undefined;
  if (!field) throw invalid(`Invalid body. ${path}.field: ${JSON.stringify(rule.field)} is not a contact field; the fields are ${fieldList}`);
  return field;
}

function presence(field: Field, present: boolean): SQL {
  if (field.kind === 'groups') return present ? sql`json_array_length(${field.expression}) > 0` : sql`json_array_length(${field.expression}) = 0`;
  if (field.kind === 'text' || field.kind === 'address') {
    return present ? sql`(${field.expression} is not null and ${field.expression} != '')` : sql`(${field.expression} is null or ${field.expression} = '')`;
  }
  return present ? sql`${field.expression} is not null` : sql`${field.expression} is null`;
}

/** `groups` takes group ids: equals and includes mean "is in the group", in means "is in one of them". */
function groupCondition(rule: FilterRule, path: string): SQL {
  const listed = rule.operator === 'in' || rule.operator === 'notIn';
  const ids = (listed ? listOf(rule.value, `${path}.value`) : [rule.value]).map((value) => requiredText(value, `${path}.value`));
  const member = inAnyGroup(ids);
  return rule.operator === 'equals' || rule.operator === 'includes' || rule.operator === 'in' ? member : sql`not ${member}`;
}

function inAnyGroup(groupIds: string[]): SQL {
  return sql`exists (select 1 from json_each(${contacts.groups}) where value in ${listed(groupIds)})`;
}

/** `(?, ?, …)`: each value bound. */
function listed(values: (string | number)[]): SQL {
  return sql`(${sql.join(values.map((value) => sql`${value}`), sql`, `)})`;
}

/**
 * `in` and `notIn` take an array, or a comma-separated string as a form's text field sends it: at least
 * one value (none would select no contact, or every one, which no client means), at most `listedMax`.
 */
function listOf(value: FilterRule['value'], path: string): (string | number)[] {
  const items = listItems(value);
  if (items.length === 0) throw invalid(`Invalid body. ${path}: in and notIn need at least one value (an array, or a comma-separated string)`);
  if (items.length > contactLimits.listedMax) throw invalid(`Invalid body. ${path}: in and notIn take at most ${contactLimits.listedMax} values`);
  return items;
}

function listItems(value: FilterRule['value']): (string | number)[] {
  if (Array.isArray(value)) return value.filter((item) => item !== '');
  if (typeof value === 'string') return value.split(',').map((item) => item.trim()).filter((item) => item !== '');
  if (typeof value === 'number') return [value];
  return [];
}

/** The rule's value as the field stores it: lowercased for addresses, ms for dates, 0/1 for booleans. */
function comparable(field: Field, value: FilterRule['value'], path: string): string | number {
  switch (field.kind) {
    // Stored with the domain in A-labels (IDN), as a client may write it either way (`eve@bücher.example`).
    case 'address':
      return withAsciiDomain(requiredText(value, path)).toLowerCase();
    case 'text':
      return field.spelling ? field.spelling(requiredText(value, path)) : requiredText(value, path);
    case 'number': {
      // A number in a string is written in decimal (a sign and a fraction allowed): `0x5` or `5e0` is no
      // number a form field means, and Number() read them as 5.
      const number = typeof value === 'number' ? value : typeof value === 'string' && decimalNumber.test(value) ? Number(value) : Number.NaN;
      if (!Number.isFinite(number)) throw invalid(`Invalid body. ${path}: must be a number (the property holds numbers)`);
      return number;
    }
    case 'date': {
      // ISO 8601 as everywhere in the API (a time without an offset is UTC, not the server's zone), or
      // milliseconds, also as digits in a string; Date.parse took "12" for December 2001.
      const ms = typeof value === 'number' ? value : typeof value === 'string' ? (/^\s*\d+\s*$/.test(value) ? Number(value) : calendarInstant(value)) : Number.NaN;
      if (!Number.isFinite(ms)) throw invalid(`Invalid body. ${path}: must be an ISO 8601 date or a time in milliseconds since the epoch`);
      return ms;
    }
    default: {
      if (value === true || value === 'true') return 1;
      if (value === false || value === 'false') return 0;
      throw invalid(`Invalid body. ${path}: must be true or false`);
    }
  }
}

const decimalNumber = /^\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)\s*$/;

function requiredText(value: FilterRule['value'], path: string): string {
  // An empty string is no value (docs/contacts.md): as a rule's value it is a missing one.
  if (value === '') throw invalid(`Invalid body. ${path}: must not be empty (this operator needs a value; anyValue and noValue ask whether there is one)`);
  if (typeof value === 'string') return value;
  if (typeof value === 'number') return String(value);
  throw invalid(`Invalid body. ${path}: must be a string${value === undefined || value === null ? ' (this operator needs a value)' : ''}`);
}
