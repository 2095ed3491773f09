import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { configSpec, defaultConfig, formatDuration, parseDuration, type Config, type KeyKind } from './schema.js';

/** A bad configuration stops the boot; the message always names the key (`http.port`). */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

export interface LoadConfigInput {
  argv?: string[];
  env?: Record<string, string | undefined>;
  cwd?: string;
}

/** Where a setting's value was read from; a setting left at its default has none. */
export type SettingOrigin = { kind: 'file'; path: string } | { kind: 'env'; name: string } | { kind: 'flag'; name: string };

/** Each loaded config's setting origins, by `section.key`: the last source read, the one that won. */
const settingOrigins = new WeakMap<object, Map<string, SettingOrigin>>();

/**
 * Where `section.key` of a config from loadConfig was set, so a message can send the operator there
 * (a variable in a container's environment is not found by reading the file). Undefined when the setting
 * kept its default, and for a config built some other way.
 */
export function settingOrigin(config: Config, dotted: string): SettingOrigin | undefined {
  return settingOrigins.get(config)?.get(dotted);
}

/** Loading order: defaults → config.toml (or --config PATH) → POSTINO_<SECTION>_<KEY> → CLI flags. */
export function loadConfig(input: LoadConfigInput = {}): Config {
  const argv = input.argv ?? [];
  const env = input.env ?? {};
  const cwd = input.cwd ?? process.cwd();
  const flags = parseFlags(argv);
  const config = defaultConfig() as unknown as Record<string, Record<string, unknown>>;
  const origins = new Map<string, SettingOrigin>();

  const explicitPath = configPathOf(flags.get('config'), env.POSTINO_CONFIG);
  const path = explicitPath ? resolve(cwd, explicitPath) : resolve(cwd, 'config.toml');
  if (explicitPath && !existsSync(path)) throw new ConfigError(`config file ${path} does not exist`);
  if (existsSync(path)) applyToml(config, readToml(path), path, origins);

  for (const [section, key] of allKeys()) {
    const envName = `POSTINO_${section}_${key}`.toUpperCase();
    const fromEnv = env[envName];
    if (fromEnv !== undefined) {
      config[section][key] = coerce(fromEnv, kindOf(section, key), `${section}.${key} (from ${envName})`);
      origins.set(`${section}.${key}`, { kind: 'env', name: envName });
    }
    const fromFlag = flags.get(`${section}.${key}`);
    if (fromFlag !== undefined) {
      config[section][key] = coerce(fromFlag, kindOf(section, key), `${section}.${key} (from --${section}.${key})`);
      origins.set(`${section}.${key}`, { kind: 'flag', name: `--${section}.${key}` });
    }
  }
  for (const name of flags.keys()) {
    if (name !== 'config' && !isKnownKey(name)) throw new ConfigError(`unknown flag --${name}`);
  }
  refuseUnknownEnv(env);
  settingOrigins.set(config, origins);
  return config as unknown as Config;
}

/**
 * The file --config or POSTINO_CONFIG names (the flag wins). An empty one is refused: an unset variable
 * (POSTINO_CONFIG=${CONFIG}) would otherwise start on ./config.toml or the defaults without a word, and a
 * CI sandbox whose file says delivery.mode = "capture" would deliver for real.
 */
function configPathOf(fromFlag: string | undefined, fromEnv: string | undefined): string | undefined {
  const [path, source] = fromFlag !== undefined ? [fromFlag, '--config'] : [fromEnv, 'POSTINO_CONFIG'];
  if (path !== undefined && path.trim() === '') throw new ConfigError(`${source} is empty: name the configuration file, or leave it out to read config.toml in the working directory`);
  return path;
}

/**
 * A misspelt variable would otherwise be ignored without a word: `POSTINO_DELIVERY_MOD=capture` in a CI
 * job would start an appliance that delivers for real.
 */
function refuseUnknownEnv(env: Record<string, string | undefined>): void {
  const known = new Set(['POSTINO_CONFIG', ...[...allKeys()].map(([section, key]) => `POSTINO_${section}_${key}`.toUpperCase())]);
  for (const name of Object.keys(env)) {
    if (!name.startsWith('POSTINO_') || known.has(name)) continue;
    const closest = [...known].map((candidate) => ({ candidate, distance: editDistance(name, candidate) })).sort((a, b) => a.distance - b.distance)[0];
    const hint = closest.distance <= 3 ? ` (did you mean ${closest.candidate}?)` : '';
    throw new ConfigError(`unknown environment variable ${name}${hint}; settings are POSTINO_<SECTION>_<KEY>, see config.example.toml`);
  }
}

/** Levenshtein distance, for the hint above. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) current[j] = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    previous = current;
  }
  return previous[b.length];
}

function readToml(path: string): Record<string, unknown> {
  try {
    return parseToml(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch (error) {
    throw new ConfigError(`${path}: ${(error as Error).message}`);
  }
}

function applyToml(config: Record<string, Record<string, unknown>>, toml: Record<string, unknown>, path: string, origins: Map<string, SettingOrigin>): void {
  for (const [section, table] of Object.entries(toml)) {
    const isTable = typeof table === 'object' && table !== null && !Array.isArray(table);
    // `port = 1` above the first [section] header is a key of no section, not a section named port.
    if (!isTable && !Object.hasOwn(configSpec, section)) throw new ConfigError(`${path}: ${section} is outside any section: every setting goes under a [section] header`);
    if (!Object.hasOwn(configSpec, section)) throw new ConfigError(`${path}: unknown section [${section}]`);
    if (!isTable) throw new ConfigError(`${path}: ${section} must be a table ([${section}])`);
    for (const [key, value] of Object.entries(table)) {
      if (!isKnownKey(`${section}.${key}`)) throw new ConfigError(`${path}: unknown key ${section}.${key}`);
      config[section][key] = coerce(value, kindOf(section, key), `${section}.${key} (in ${path})`);
      origins.set(`${section}.${key}`, { kind: 'file', path });
    }
  }
}

/** `--http.port 8081`, `--http.port=8081`, `--http-port=8081` and `--config PATH`. */
function parseFlags(argv: string[]): Map<string, string> {
  const flags = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) throw new ConfigError(`unexpected argument "${arg}" (flags look like --http.port=8080)`);
    const body = arg.slice(2);
    const eq = body.indexOf('=');
    let name = eq >= 0 ? body.slice(0, eq) : body;
    let value = eq >= 0 ? body.slice(eq + 1) : argv[i + 1];
    if (eq < 0) {
      if (value === undefined || value.startsWith('--')) throw new ConfigError(`flag --${name} needs a value`);
      i++;
    }
    name = normalizeFlagName(name);
    flags.set(name, value);
  }
  return flags;
}

function normalizeFlagName(name: string): string {
  if (name.includes('.') || name === 'config') return name;
  const dash = name.indexOf('-');
  if (dash < 0) return name;
  return `${name.slice(0, dash)}.${name.slice(dash + 1).replaceAll('-', '_')}`;
}

function* allKeys(): Generator<[string, string]> {
  for (const [section, keys] of Object.entries(configSpec)) for (const key of Object.keys(keys)) yield [section, key];
}

/** Own keys only: `toString` or `hasOwnProperty` is no setting. */
function isKnownKey(dotted: string): boolean {
  const [section, key] = dotted.split('.');
  return Object.hasOwn(configSpec, section) && Object.hasOwn((configSpec as Record<string, Record<string, unknown>>)[section], key);
}

function kindOf(section: string, key: string): KeyKind {
  return ((configSpec as Record<string, Record<string, { kind: KeyKind }>>)[section][key]).kind;
}

/** Turns a TOML value or an env/flag string into the key's type, or throws naming the key. */
export function coerce(value: unknown, kind: KeyKind, name: string): unknown {
  const shown = kind.type === 'string' && kind.secret ? 'a value not shown (a secret)' : JSON.stringify(value);
  const fail = (rule: string): never => {
    throw new ConfigError(`${name}: ${rule}, got ${shown}`);
  };
  const inRange = (ms: number) => 'min' in kind && ms >= kind.min && ms <= kind.max;
  const rangeRule = () => ('min' in kind ? `must be between ${formatDuration(kind.min)} and ${formatDuration(kind.max)}` : '');
  switch (kind.type) {
    case 'string':
      if (typeof value !== 'string') return fail('must be a string');
      return !kind.pattern || kind.pattern.test(value) ? value : fail(kind.rule ?? `must match ${kind.pattern}`);
    case 'int': {
      // Digits only: Number() would also read `0x4650` and `1e4`.
      const n = typeof value === 'string' && /^\s*-?\d+\s*$/.test(value) ? Number(value) : value;
      if (typeof n !== 'number' || !Number.isInteger(n)) return fail('must be a whole number');
      if (n < kind.min || n > kind.max) return fail(`must be between ${kind.min} and ${kind.max}`);
      return n;
    }
    case 'bool':
      if (typeof value === 'boolean') return value;
      if (value === 'true' || value === '1') return true;
      if (value === 'false' || value === '0') return false;
      return fail('must be true or false');
    case 'enum':
      return typeof value === 'string' && kind.values.includes(value) ? value : fail(`must be one of ${kind.values.join(', ')}`);
    case 'list':
      return toList(value) ?? fail('must be a list of strings (TOML array, or comma-separated in env/flags)');
    case 'duration': {
      const parsed = toDuration(value) ?? fail('must be a duration such as 30s, 5m, 1h, 5d');
      return inRange(parsed) ? parsed : fail(rangeRule());
    }
    case 'durations': {
      const items = toList(value);
      const parsed = items?.map(toDuration);
      if (!parsed || parsed.length === 0 || parsed.some((d) => d === undefined)) {
        return fail('must be a non-empty list of durations such as ["5m", "1h"] or 5m,1h');
      }
      return parsed.every((d) => inRange(d!)) ? parsed : fail(`every entry ${rangeRule()}`);
    }
  }
}

function toList(value: unknown): string[] | undefined {
  if (Array.isArray(value)) return value.every((v) => typeof v === 'string') ? (value as string[]) : undefined;
  if (typeof value !== 'string') return undefined;
  return value.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
}

function toDuration(value: unknown): number | undefined {
  if (typeof value !== 'string') return undefined;
  try {
    return parseDuration(value);
  } catch {
    return undefined;
  }
}

/** The process's own config: argv after the script name and the real environment. */
export function loadProcessConfig(argv = process.argv.slice(2)): Config {
  return loadConfig({ argv, env: process.env, cwd: process.cwd() });
}

/**
 * Where the operator typed a command: `npm run postino -- backup ./today.sqlite` runs in the package's
 * folder (npm's working directory), and npm keeps the operator's in INIT_CWD.
 */
export function invocationDirectory(): string {
  return process.env.INIT_CWD ?? process.cwd();
}
