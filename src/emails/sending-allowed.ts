/**
 * The send path's sending guard until the delivery feature's is wired (spec §8's suspension rule,
 * delivery/reputation.ts, which throws \`email-sending-paused\`): no project is paused.
 */
export const allowEverySender = { assertSendingAllowed(_projectId: string): void {} };
