/**
 * `work`'s value if it settles within `ms`, else `{ done: false }` (the work is not stopped; its later
 * outcome is ignored). A rejection within `ms` rejects. The timer is cleared either way, so a short wait
 * never keeps the process alive for the full `ms`.
 */
export async function waitAtMost<T>(work: Promise<T>, ms: number): Promise<{ done: true; value: T } | { done: false }> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<{ done: false }>((resolve) => {
    timer = setTimeout(() => resolve({ done: false }), ms);
  });
  try {
    return await Promise.race([work.then((value) => ({ done: true as const, value })), expired]);
  } finally {
    clearTimeout(timer);
  }
}
