import { parentPort } from 'node:worker_threads';
import { composeMessage, type ComposeInput } from './compose.js';
import { createInlineDkimSigner, type DkimKey } from './dkim.js';

/**
 * Worker-thread entry: compose + DKIM-sign messages. Both are CPU work on data the main thread
 * already loaded (composition ~0.2 ms, RSA-2048 ~0.7 ms per message), so the event loop keeps serving
 * the API and the SMTP sockets. Parsed private keys are cached by the inline signer of this thread.
 */
export interface BuildRequest {
  id: number;
  input: ComposeInput;
  key?: DkimKey;
  timestampSec: number;
}

export type BuildReply = { id: number; message: Uint8Array } | { id: number; error: string };

const signer = createInlineDkimSigner();

// The main thread posts the builds of one event-loop turn together (message-builder.ts); each is answered
// as soon as it is built, so the first message of a batch goes out without waiting for the last.
parentPort?.on('message', (batch: BuildRequest[]) => {
  for (const request of batch) {
    void handle(request).then((reply) => {
      if ('message' in reply) parentPort!.postMessage(reply, [reply.message.buffer as ArrayBuffer]);
      else parentPort!.postMessage(reply);
    });
  }
});

async function handle(request: BuildRequest): Promise<BuildReply> {
  try {
    const input: ComposeInput = {
      ...request.input,
      // Structured clone turns Buffers into Uint8Arrays; MailComposer wants Buffers.
      attachments: request.input.attachments.map((a) => ({ ...a, content: Buffer.from(a.content.buffer, a.content.byteOffset, a.content.byteLength) })),
    };
    const composed = composeMessage(input);
    const signed = request.key ? await signer.sign(composed, request.key, request.timestampSec) : composed;
    // Copy into a standalone buffer so it can be transferred (pooled Buffers share one ArrayBuffer).
    const out = new Uint8Array(signed.length);
    out.set(signed);
    return { id: request.id, message: out };
  } catch (error) {
    return { id: request.id, error: (error as Error)?.stack ?? String(error) };
  }
}
