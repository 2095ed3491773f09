/**
 * What deleting the email aliased `e` frees, in bytes: its bodies, render snapshot, attachments and
 * captured message, for deletes bounded by bytes (lib/batches.ts leadingWithinBytes). octet_length() and
 * length() of a value come from its row header: nothing measured here is read.
 */
export function emailStoredBytesSql(e: string): string {
  return `coalesce(octet_length(${e}.html), 0) + coalesce(octet_length(${e}.text), 0) + coalesce(octet_length(${e}.render_snapshot), 0)
    + (select coalesce(sum(a.size), 0) from email_attachments a where a.email_id = ${e}.id)
    + coalesce((select length(c.raw) from captured_messages c where c.email_id = ${e}.id), 0)`;
}
