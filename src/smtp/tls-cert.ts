import { X509Certificate, generateKeyPairSync, randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createSecureContext } from 'node:tls';
import forge from 'node-forge';
import type { Clock } from '../lib/clock.js';
import { StartupError } from '../lib/errors.js';

export interface TlsMaterial {
  key: string;
  cert: string;
  /** Where it came from, for the boot log. */
  origin: 'configured' | 'generated' | 'stored';
  /** A stored certificate made for another host name than the one configured now (for the boot log). */
  mismatch?: string;
}

/**
 * STARTTLS key and certificate of both SMTP listeners (submission and the inbound MX): the configured PEM
 * files (`submission.tls_key`, `submission.tls_cert`), else a self-signed certificate kept in
 * `<data_dir>/tls/` (generated once, so clients that pin it keep working after a restart). Pure JS
 * (node-forge) because `openssl` is not on every machine the appliance runs on.
 */
export function loadSmtpTls(options: { keyPath: string; certPath: string; dataDir: string; hostname: string; clock: Clock }): TlsMaterial {
  if (options.keyPath || options.certPath) {
    if (!options.keyPath || !options.certPath) throw new StartupError('submission.tls_key and submission.tls_cert must be set together');
    const configured = { key: readPem(options.keyPath, 'submission.tls_key'), cert: readPem(options.certPath, 'submission.tls_cert') };
    assertUsable(configured, `submission.tls_key / submission.tls_cert (${options.keyPath}, ${options.certPath})`);
    return { ...configured, origin: 'configured' };
  }
  const dir = join(options.dataDir, 'tls');
  const keyFile = join(dir, 'submission-key.pem');
  const certFile = join(dir, 'submission-cert.pem');
  if (storedPairComplete(keyFile, certFile)) {
    const stored = { key: readPem(keyFile, 'the generated TLS key'), cert: readPem(certFile, 'the generated TLS certificate') };
    assertUsable(stored, `the generated TLS key and certificate in ${dir} (delete both to generate new ones)`);
    // Kept as it is (clients may have pinned it), but a host name changed since is said at boot.
    const mismatch =
      new X509Certificate(stored.cert).checkHost(options.hostname) === undefined
        ? `the generated TLS certificate in ${dir} does not name ${options.hostname} (the host name configured now); delete ${dir} and restart to generate one that does`
        : undefined;
    return { ...stored, origin: 'stored', mismatch };
  }
  const generated = memo.get(options.hostname) ?? generateSelfSigned(options.hostname, options.clock.now());
  memo.set(options.hostname, generated);
  mkdirSync(dir, { recursive: true });
  // The key first, the certificate last: a stored certificate then always has its key beside it.
  writeDurably(keyFile, generated.key, 0o600);
  writeDurably(certFile, generated.cert, 0o644);
  syncDirectory(dir);
  return { ...generated, origin: 'generated' };
}

/**
 * Both files there and not empty. A first start on a full disk (ENOSPC) or a crash before writeback left
 * an empty file, and every later start then failed to parse it, even with room again: an empty file was
 * never served, so no client can have pinned it, and a new pair takes its place.
 */
function storedPairComplete(keyFile: string, certFile: string): boolean {
  return [keyFile, certFile].every((file) => {
    try {
      return statSync(file).size > 0;
    } catch {
      return false;
    }
  });
}

/** Written beside, synced, then renamed over `path`: a crash or a full disk leaves the whole file or none. */
function writeDurably(path: string, contents: string, mode: number): void {
  const temporary = `${path}.tmp`;
  writeFileSync(temporary, contents, { mode });
  const fd = openSync(temporary, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temporary, path);
}

/** The renames above are on the disk only once their directory is (where a directory can be synced: not on Windows). */
function syncDirectory(dir: string): void {
  let fd: number;
  try {
    fd = openSync(dir, 'r');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EISDIR' || (error as NodeJS.ErrnoException).code === 'EPERM') return;
    throw error;
  }
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Checked here, before anything is created: the SMTP listeners parse them only later in the boot, after
 * the default project (and a generated API key no one would see) was committed, and failed with an
 * OpenSSL stack trace.
 */
function assertUsable(material: { key: string; cert: string }, what: string): void {
  try {
    createSecureContext(material);
    new X509Certificate(material.cert); // an empty certificate passes the line above, and failed below it with a stack trace
  } catch (error) {
    throw new StartupError(`${what}: not a usable key and certificate (${(error as Error).message})`);
  }
}

function readPem(path: string, setting: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    throw new StartupError(`${setting}: cannot read ${path} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
}

/**
 * One generated certificate per hostname per process: RSA keygen costs 100-300 ms, and test suites start
 * many appliances with fresh data dirs. A second appliance in one process sharing the cert is harmless.
 */
const memo = new Map<string, { key: string; cert: string }>();

/** RSA-2048 key from node:crypto (native, fast); node-forge only builds and signs the X.509 certificate. */
export function generateSelfSigned(hostname: string, now: Date): { key: string; cert: string } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const key = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }).toString());
  // Positive serial: a leading 0x00 byte would otherwise be read as a sign bit by strict parsers.
  cert.serialNumber = '01' + randomBytes(15).toString('hex');
  cert.validity.notBefore = new Date(now.getTime() - 86_400_000);
  cert.validity.notAfter = new Date(now.getTime() + 10 * 365 * 86_400_000);
  const attrs = [{ name: 'commonName', value: hostname }, { name: 'organizationName', value: 'Postino self-signed' }];
  cert.setSubject(attrs);
  cert.setIssuer(attrs);
  cert.setExtensions([
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
    { name: 'extKeyUsage', serverAuth: true },
    { name: 'subjectAltName', altNames: [{ type: 2, value: hostname }, { type: 2, value: 'localhost' }, { type: 7, ip: '127.0.0.1' }, { type: 7, ip: '::1' }] },
  ]);
  cert.sign(forge.pki.privateKeyFromPem(key), forge.md.sha256.create());
  return { key, cert: forge.pki.certificateToPem(cert) };
}
