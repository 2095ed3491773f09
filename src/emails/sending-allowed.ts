/**
 * Hook point for sending suspension (spec §8: bounce/complaint rates). The delivery feature replaces
 * this body; it must throw `AppError('email-sending-paused', …)` when the project may not send.
 */
export function assertSendingAllowed(_projectId: string): void {}
