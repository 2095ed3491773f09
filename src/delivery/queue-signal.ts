import { createWakeSignal } from '../db/wake-signal.js';

/**
 * The send path calls `notifyDeliveryQueued(db)` after committing new `delivery_jobs` rows so the worker
 * starts at once instead of at its next poll.
 */
const deliveryQueued = createWakeSignal();

export const onDeliveryQueued = deliveryQueued.on;
export const notifyDeliveryQueued = deliveryQueued.notify;
