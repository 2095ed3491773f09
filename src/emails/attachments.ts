/** Spec §4.2: allowed extensions and the content type each one implies. */
const contentTypes: Record<string, string> = {
  jpg: 'image/jpeg',
  pdf: 'application/pdf',
  csv: 'text/csv',
  html: 'text/html',
  png: 'image/png',
  gif: 'image/gif',
  json: 'application/json',
  txt: 'text/plain',
};

/** Content type for an attachment name, or undefined when the name is not `<1+ chars>.<allowed ext>`. */
export function attachmentContentType(name: string): string | undefined {
  const match = /^.+\.([A-Za-z]+)$/s.exec(name);
  return match ? contentTypes[match[1].toLowerCase()] : undefined;
}

// RFC 4648 §4: the standard alphabet, padded to a multiple of 4, no whitespace or line breaks.
const base64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export function isBase64(value: string): boolean {
  return base64.test(value);
}
