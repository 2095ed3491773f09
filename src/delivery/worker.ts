import { isStorageBusy, isStorageFull, isStorageStopped } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';

/**
 * The delivery worker claims due rows of `delivery_jobs` and delivers them. `tick` does one pass and
 * says whether there is more to do at once; the loop repeats immediately while there is and sleeps otherwise.
 */
export interface DeliveryWorkerDeps {
  log: Logger;
  /** One pass over due jobs; resolves with whether another should follow at once (it found work). */
  tick(): Promise<boolean>;
  idleDelayMs?: number;
  /** Runs once before the first pass (crash recovery: release leases of the previous process). */
  recover?(): void;
  /** Called first by stop(): start nothing new, and let a pass that waits for a free slot end now. */
  halt?(): void;
  /** Awaited by stop() after the last pass: lets deliveries in flight finish and closes connections. */
  drain?(): Promise<void>;
}

export interface DeliveryWorker {
  start(): void;
  /** Stops claiming new work and waits for the pass in flight. */
  stop(): Promise<void>;
  /** Wakes the loop now (new mail was queued). */
  poke(): void;
  readonly state: 'stopped' | 'running';
}

export function createDeliveryWorker(deps: DeliveryWorkerDeps): DeliveryWorker {
  let state: DeliveryWorker['state'] = 'stopped';
  let timer: NodeJS.Timeout | undefined;
  let pass: Promise<void> | undefined;
  /**
   * A poke during a pass: its claim may have been read before the new job committed (an accept on the
   * main connection in the same batch, after the claim), so one more pass follows at once instead of the
   * job waiting for the idle delay.
   */
  let pokedDuringPass = false;
  const idleDelay = deps.idleDelayMs ?? 1000;

  const loop = () => {
    timer = undefined;
    if (state !== 'running' || pass) return;
    pass = deps
      .tick()
      .then(
        (foundWork) => foundWork,
        (error) => {
          // Out of space is reported once per episode (storage-health.ts); the next pass tries again.
          if (isStorageFull(error)) deps.log.debug('delivery pass refused: storage full');
          // So is a write lock held by another process.
          else if (isStorageBusy(error)) deps.log.debug('delivery pass refused: another process holds the write lock');
          // A failed sync of the database is reported once (write-queue.ts); every pass is refused until a restart.
          else if (isStorageStopped(error)) deps.log.debug('delivery pass refused: the database stores nothing until a restart');
          else deps.log.error('delivery pass failed', { error });
          return false;
        },
      )
      .then((foundWork) => {
        pass = undefined;
        const again = foundWork || pokedDuringPass;
        pokedDuringPass = false;
        if (state === 'running') timer = setTimeout(loop, again ? 0 : idleDelay);
      });
  };

  return {
    get state() {
      return state;
    },
    start() {
      if (state === 'running') return;
      state = 'running';
      deps.recover?.();
      loop();
    },
    async stop() {
      state = 'stopped';
      if (timer) clearTimeout(timer);
      timer = undefined;
      deps.halt?.();
      await pass;
      await deps.drain?.();
    },
    poke() {
      if (state !== 'running') return;
      if (pass) {
        pokedDuringPass = true;
        return;
      }
      if (timer) clearTimeout(timer);
      timer = setTimeout(loop, 0);
    },
  };
}
