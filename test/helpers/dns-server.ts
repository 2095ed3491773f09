import { createSocket, type Socket } from 'node:dgram';
import type { AddressInfo } from 'node:net';
import * as dnsPacket from 'dns-packet';

/**
 * A real authoritative DNS server on loopback UDP for tests: the appliance's resolver is pointed at it
 * through `dns.servers`, so MX/A/TXT lookups go over the wire exactly as in production.
 */
export type RecordType = 'A' | 'AAAA' | 'MX' | 'TXT' | 'CNAME';
export type MxValue = { preference: number; exchange: string };
export type RecordValue = string | MxValue;

export interface TestDnsServer {
  /** `127.0.0.1:PORT`, ready for `POSTINO_DNS_SERVERS`. */
  address: string;
  port: number;
  /** Replaces the records of one type at a name. */
  set(name: string, type: 'MX', values: MxValue[]): void;
  set(name: string, type: 'A' | 'AAAA' | 'TXT' | 'CNAME', values: string[]): void;
  /** Removes every record at a name (it then answers NXDOMAIN). */
  remove(name: string): void;
  /** Makes every query for a name (of one type only, when given) answer with this rcode (e.g. SERVFAIL), or never answer (timeout). */
  fail(name: string, mode: 'SERVFAIL' | 'REFUSED' | 'timeout', type?: RecordType): void;
  clearFailure(name: string): void;
  /** Queries for a name get no answer until release(name), which answers them with the records then. */
  hold(name: string): void;
  release(name: string): void;
  /** Queries received, for assertions. */
  queries: { name: string; type: string }[];
  stop(): Promise<void>;
}

export async function startDnsServer(): Promise<TestDnsServer> {
  const zones = new Map<string, Map<RecordType, RecordValue[]>>();
  const failures = new Map<string, 'SERVFAIL' | 'REFUSED' | 'timeout'>();
  const queries: { name: string; type: string }[] = [];
  const held = new Map<string, (() => void)[]>();
  const socket: Socket = createSocket('udp4');

  socket.on('message', (message, remote) => {
    let request: dnsPacket.Packet;
    try {
      request = dnsPacket.decode(message);
    } catch {
      return;
    }
    const question = request.questions?.[0];
    if (!question) return;
    const name = question.name.toLowerCase().replace(/\.$/, '');
    queries.push({ name, type: question.type });
    const failure = failures.get(`${name} ${question.type}`) ?? failures.get(name);
    if (failure === 'timeout') return;
    const answer = () => socket.send(dnsPacket.encode(buildResponse(request, question, name, zones, failure)), remote.port, remote.address);
    const waiting = held.get(name);
    if (waiting) waiting.push(answer);
    else answer();
  });

  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  const port = (socket.address() as AddressInfo).port;

  return {
    address: `127.0.0.1:${port}`,
    port,
    queries,
    set(name: string, type: RecordType, values: RecordValue[]) {
      const key = name.toLowerCase();
      if (!zones.has(key)) zones.set(key, new Map());
      zones.get(key)!.set(type, values);
    },
    remove(name) {
      zones.delete(name.toLowerCase());
    },
    fail(name, mode, type) {
      failures.set(type ? `${name.toLowerCase()} ${type}` : name.toLowerCase(), mode);
    },
    clearFailure(name) {
      for (const key of [...failures.keys()]) if (key === name.toLowerCase() || key.startsWith(`${name.toLowerCase()} `)) failures.delete(key);
    },
    hold(name) {
      held.set(name.toLowerCase(), []);
    },
    release(name) {
      const waiting = held.get(name.toLowerCase()) ?? [];
      held.delete(name.toLowerCase());
      for (const answer of waiting) answer();
    },
    stop: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

const rcodeNumbers = { SERVFAIL: 2, NXDOMAIN: 3, REFUSED: 5 } as const;

function buildResponse(
  request: dnsPacket.Packet,
  question: dnsPacket.Question,
  name: string,
  zones: Map<string, Map<RecordType, RecordValue[]>>,
  failure: 'SERVFAIL' | 'REFUSED' | undefined,
): dnsPacket.Packet {
  const base = { id: request.id, type: 'response' as const, questions: [question], flags: dnsPacket.AUTHORITATIVE_ANSWER | dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE };
  // dns-packet encodes the rcode only from the low 4 bits of `flags` (the `rcode` field is decode-only).
  if (failure) return { ...base, flags: base.flags | rcodeNumbers[failure], rcode: failure } as dnsPacket.Packet;
  const records = zones.get(name);
  if (!records) return { ...base, flags: base.flags | rcodeNumbers.NXDOMAIN, rcode: 'NXDOMAIN' } as dnsPacket.Packet;
  const values = records.get(question.type as RecordType) ?? [];
  const answers = values.map((value) => toAnswer(question.name, question.type as RecordType, value));
  return { ...base, rcode: 'NOERROR', answers } as dnsPacket.Packet;
}

function toAnswer(name: string, type: RecordType, value: RecordValue): dnsPacket.Answer {
  switch (type) {
    case 'MX':
      return { name, type, ttl: 60, class: 'IN', data: value as MxValue } as dnsPacket.Answer;
    case 'TXT':
      // A TXT string holds at most 255 bytes; long values (DKIM keys) are split into several strings.
      return { name, type, ttl: 60, class: 'IN', data: splitTxt(value as string) } as dnsPacket.Answer;
    default:
      return { name, type, ttl: 60, class: 'IN', data: value as string } as dnsPacket.Answer;
  }
}

function splitTxt(value: string): string[] {
  const parts: string[] = [];
  for (let i = 0; i < value.length; i += 255) parts.push(value.slice(i, i + 255));
  return parts.length > 0 ? parts : [''];
}
