/**
 * RFC 3464 / RFC 5965 report bodies are groups of header-style fields (`Name: value`, continuation
 * lines start with white space) separated by blank lines. Pure; never throws.
 */
export type FieldGroup = Map<string, string>;

/** Splits `text` into field groups; lines that are not fields are skipped, names are lowercased. */
export function parseFieldGroups(text: string): FieldGroup[] {
  const groups: FieldGroup[] = [];
  let current: FieldGroup | undefined;
  let lastName: string | undefined;
  for (const line of text.split(/\r?\n/)) {
    if (line.trim() === '') {
      current = undefined;
      lastName = undefined;
      continue;
    }
    if (/^[ \t]/.test(line) && current && lastName) {
      current.set(lastName, `${current.get(lastName)} ${line.trim()}`);
      continue;
    }
    const match = /^([A-Za-z][A-Za-z0-9-]*)[ \t]*:[ \t]*(.*)$/.exec(line);
    if (!match) {
      lastName = undefined;
      continue;
    }
    if (!current) groups.push((current = new Map()));
    lastName = match[1].toLowerCase();
    // The first occurrence wins: a field repeated later in the group is usually a quoted copy.
    if (!current.has(lastName)) current.set(lastName, match[2].trim());
    else lastName = undefined;
  }
  return groups.filter((group) => group.size > 0);
}

/** `rfc822; user@example.com` → `user@example.com` (address-type prefix and angle brackets dropped). */
export function stripAddressType(value: string | undefined): string | undefined {
  if (!value) return undefined;
  const semi = value.indexOf(';');
  const address = (semi >= 0 ? value.slice(semi + 1) : value).trim().replace(/^<|>$/g, '').trim();
  return address || undefined;
}
