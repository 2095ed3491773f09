import { connect, type Socket } from 'node:net';
import { connect as tlsConnect, type PeerCertificate, type TLSSocket } from 'node:tls';

/**
 * A line-level SMTP client for what nodemailer hides: the EHLO features, the certificate STARTTLS
 * presents, a DATA stream written by hand.
 */
export interface RawSmtpSession {
  /** Sends one command line; resolves with the whole reply (every line of a multi-line one). */
  command(line: string): Promise<string>;
  /** STARTTLS, then the TLS handshake (any certificate); resolves with the server's certificate. */
  startTls(): Promise<PeerCertificate>;
  /** Writes raw bytes (a DATA body); resolves once the socket took them. */
  write(data: Buffer | string): Promise<void>;
  /** Resolves with the next reply, for replies that follow a `write`. */
  reply(): Promise<string>;
  close(): void;
}

export async function openSmtpSession(port: number, host = '127.0.0.1'): Promise<RawSmtpSession & { greeting: string }> {
  let socket: Socket | TLSSocket = connect(port, host);
  let buffered = '';
  let waiting: ((reply: string) => void) | undefined;
  const onData = (chunk: Buffer) => {
    buffered += chunk.toString('latin1');
    // A reply ends with a line whose code is followed by a space ("250 ok"), not a dash ("250-SIZE").
    const end = /(^|\r\n)\d{3} [^\r\n]*\r\n/.exec(buffered);
    if (!end || !waiting) return;
    const length = end.index + end[0].length;
    const reply = buffered.slice(0, length);
    buffered = buffered.slice(length);
    const resolve = waiting;
    waiting = undefined;
    resolve(reply);
  };
  const reply = () =>
    new Promise<string>((resolve, reject) => {
      // One error listener per reply, removed with it: a long session would otherwise pile them up.
      const current = socket;
      current.once('error', reject);
      waiting = (answer) => {
        current.off('error', reject);
        resolve(answer);
      };
      onData(Buffer.alloc(0));
    });
  socket.on('data', onData);
  const greeting = await reply();
  const write = (data: Buffer | string) => new Promise<void>((resolve, reject) => socket.write(data, (error) => (error ? reject(error) : resolve())));
  const command = async (line: string) => {
    const answer = reply();
    await write(`${line}\r\n`);
    return answer;
  };
  return {
    greeting,
    reply,
    write,
    command,
    async startTls() {
      const answer = await command('STARTTLS');
      if (!answer.startsWith('220')) throw new Error(`STARTTLS refused: ${answer}`);
      socket.off('data', onData);
      const secure = tlsConnect({ socket: socket as Socket, rejectUnauthorized: false });
      await new Promise<void>((resolve, reject) => secure.once('secureConnect', resolve).once('error', reject));
      secure.on('data', onData);
      socket = secure;
      return secure.getPeerCertificate();
    },
    close: () => socket.destroy(),
  };
}
