// Postfix's smtp-source and smtp-sink, unpacked from Debian's package without installing or starting
// Postfix (apt-get download + dpkg -x): the SMTP ceiling of this machine, measured beside our own figures.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { join } from 'node:path';

export interface PostfixTools {
  sink: string;
  source: string;
  libDir: string;
}

export function unpackPostfix(dir: string): PostfixTools {
  const debDir = join(dir, 'deb');
  execFileSync('mkdir', ['-p', debDir]);
  execFileSync('apt-get', ['download', 'postfix'], { cwd: debDir, stdio: 'ignore' });
  const deb = readdirSync(debDir).find((f) => f.endsWith('.deb'));
  if (!deb) throw new Error('apt-get download postfix produced no .deb');
  execFileSync('dpkg', ['-x', join(debDir, deb), join(debDir, 'x')]);
  const root = join(debDir, 'x');
  return { sink: join(root, 'usr/sbin/smtp-sink'), source: join(root, 'usr/sbin/smtp-source'), libDir: join(root, 'usr/lib/postfix') };
}

export function startPostfixSink(tools: PostfixTools, port: number, dir: string): ChildProcess {
  // -u is required when running as root; 1000 = listen backlog.
  return spawn(tools.sink, ['-u', 'nobody', '-c', `127.0.0.1:${port}`, '1000'], { env: { LD_LIBRARY_PATH: tools.libDir }, cwd: dir, stdio: 'ignore' });
}

/** smtp-source → smtp-sink in msg/s; `extraArgs` such as `-d` (several messages per connection). */
export async function measurePostfix(tools: PostfixTools, dir: string, extraArgs: string[] = []): Promise<number> {
  const port = await freePort();
  const sink = startPostfixSink(tools, port, dir);
  try {
    await waitForPort(port);
    const count = 20_000;
    const started = performance.now();
    // 20 parallel sessions, 4 kB messages: about the size of a composed and signed transactional email.
    execFileSync(tools.source, [...extraArgs, '-s', '20', '-m', String(count), '-l', '4000', '-f', 'a@source.test', '-t', 'b@sink.test', `127.0.0.1:${port}`], {
      env: { LD_LIBRARY_PATH: tools.libDir },
      stdio: 'ignore',
    });
    return count / ((performance.now() - started) / 1000);
  } finally {
    sink.kill('SIGKILL');
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

export async function waitForPort(port: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = new Socket();
      socket.once('connect', () => (socket.destroy(), resolve(true)));
      socket.once('error', () => resolve(false));
      socket.connect(port, '127.0.0.1');
    }).catch(() => false);
    if (ok) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`port ${port} did not open`);
}
