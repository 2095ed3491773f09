import { spawn, type ChildProcess } from 'node:child_process';

/**
 * Runs the real appliance (`src/main.ts` through tsx, or the bundle: `args` ['dist/main.js']) as a child
 * process, for tests that need signals (kill -9, SIGTERM) or the bundle. Resolves once it logged
 * "postino started", with the ports it chose.
 */
export interface ChildAppliance {
  child: ChildProcess;
  httpPort: number;
  smtpPort: number;
  output(): string;
  /** Resolves with the exit code (or signal name). */
  exited: Promise<number | string>;
}

export function startChildAppliance(env: Record<string, string>, timeoutMs = 20_000, args = ['--import', 'tsx', 'src/main.ts']): Promise<ChildAppliance> {
  const child = spawn(process.execPath, args, {
    env: { ...process.env, POSTINO_HTTP_PORT: '0', POSTINO_SMTP_PORT: '0', POSTINO_SMTP_HOST: '127.0.0.1', POSTINO_SUBMISSION_PORT: '0', POSTINO_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const exited = new Promise<number | string>((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal ?? -1)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`appliance did not start in ${timeoutMs} ms:\n${out}`));
    }, timeoutMs);
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      const match = /"msg":"postino started","httpPort":(\d+),"smtpPort":(\d+)/.exec(out);
      if (match) {
        clearTimeout(timer);
        resolve({ child, httpPort: Number(match[1]), smtpPort: Number(match[2]), output: () => out, exited });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`appliance exited (${code}) before starting:\n${out}`));
    });
  });
}
