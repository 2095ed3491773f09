import { configSpec, type KeySpec } from './schema.js';

/**
 * Renders `config.example.toml` from the schema so the documented defaults can never drift from the
 * real ones (a test compares the committed file with this output).
 */
export function renderExampleToml(): string {
  const lines = [
    '# Postino configuration. Every key is shown with its default value.',
    '# Copy to config.toml (or pass --config PATH). Each key can also be set with the environment variable',
    '# POSTINO_<SECTION>_<KEY> (e.g. POSTINO_HTTP_PORT=8081) or a flag (--http.port=8081); flags win over the',
    '# environment, which wins over this file. An unknown key, flag or POSTINO_* variable stops the boot, as',
    '# does a value out of its range (durations: more than 0 unless 0 is described, at most 24d for delays',
    '# the appliance waits on; a few keys have narrower ranges of their own), and the message names the key',
    '# and its range.',
  ];
  for (const [section, keys] of Object.entries(configSpec)) {
    lines.push('', `[${section}]`);
    for (const [key, spec] of Object.entries(keys) as [string, KeySpec<unknown> & { text?: unknown }][]) {
      lines.push(`# ${spec.description}`);
      lines.push(`${key} = ${tomlValue(spec.text ?? spec.default)}`);
    }
  }
  return lines.join('\n') + '\n';
}

function tomlValue(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(tomlValue).join(', ')}]`;
  if (typeof value === 'string') return JSON.stringify(value);
  return String(value);
}
