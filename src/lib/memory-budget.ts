/**
 * Bounds the memory that large requests take together. A request holds several times its body until it
 * is answered (the bytes read, the JSON text, the parsed strings, decoded attachments, the copy sent to
 * the writer thread): 160 clients each sending a 9.3 MB batch at once took the appliance past its 1 GB
 * heap, and V8 aborts the process there; so did 60 SMTP submissions of 24 MB messages at once. A body
 * that would take the sum of those in flight past the limit waits, in arrival order, until enough of
 * them are answered (an HTTP body unread, TCP holding the sender back; a submitted message before it is
 * parsed). Bodies under `smallBytes` (every ordinary send) never wait and are not counted; one larger
 * than the whole limit runs alone.
 */
export interface MemoryBudget {
  /** A claim on `bytes` of the limit: `granted` resolves once it holds them. */
  reserve(bytes: number): MemoryReservation;
  /** Bytes of the bodies now held (metrics, tests). */
  readonly bytesInFlight: number;
  /** Requests waiting for room (metrics, tests). */
  readonly waiting: number;
}

export interface MemoryReservation {
  granted: Promise<void>;
  /** Once granted: gives back what it holds over `bytes` (a worst case reserved, the real size known since). */
  keep(bytes: number): void;
  /** Gives the bytes back, or leaves the queue if still waiting (a client that went away). Idempotent. */
  release(): void;
}

/** Under this many bytes a body is read at once, whatever else is in flight. */
export const smallBodyBytes = 64 * 1024;

export function createMemoryBudget(limitBytes: number, smallBytes = smallBodyBytes): MemoryBudget {
  let bytesInFlight = 0;
  const queue: { bytes: number; grant: () => void }[] = [];

  const fits = (bytes: number) => bytesInFlight === 0 || bytesInFlight + bytes <= limitBytes;
  const admitWaiting = () => {
    // In order: a large body at the head is not overtaken by smaller ones forever.
    while (queue.length > 0 && fits(queue[0].bytes)) {
      const next = queue.shift()!;
      bytesInFlight += next.bytes;
      next.grant();
    }
  };

  return {
    reserve(requested) {
      if (requested < smallBytes) return { granted: Promise.resolve(), keep: () => {}, release: () => {} };
      let bytes = Math.min(requested, limitBytes);
      let state: 'waiting' | 'held' | 'released' = 'waiting';
      let resolveGranted!: () => void;
      const granted = new Promise<void>((resolve) => (resolveGranted = resolve));
      const entry = {
        bytes,
        grant: () => {
          state = 'held';
          resolveGranted();
        },
      };
      if (queue.length === 0 && fits(bytes)) {
        bytesInFlight += bytes;
        entry.grant();
      } else {
        queue.push(entry);
      }
      return {
        granted,
        keep(kept) {
          if (state !== 'held' || kept >= bytes) return;
          bytesInFlight -= bytes - kept;
          bytes = kept;
          admitWaiting();
        },
        release() {
          if (state === 'held') {
            bytesInFlight -= bytes;
            admitWaiting();
          } else if (state === 'waiting') {
            queue.splice(queue.indexOf(entry), 1);
            admitWaiting(); // the head may have been what held the others back
          }
          state = 'released';
        },
      };
    },
    get bytesInFlight() {
      return bytesInFlight;
    },
    get waiting() {
      return queue.length;
    },
  };
}
