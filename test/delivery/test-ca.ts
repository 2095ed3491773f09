import { generateKeyPairSync } from 'node:crypto';
import forge from 'node-forge';

/**
 * A throw-away certificate authority for TLS tests: the appliance trusts it through
 * `delivery.extra_ca_file`, so certificates it signs are "valid" exactly as a public CA's would be.
 */
export interface TestCa {
  certPem: string;
  /**
   * A server certificate for `names` (subjectAltName DNS entries) signed by this CA; with `cnOnly`, the
   * first name as its subject common name and no subjectAltName at all (a legacy certificate).
   */
  issue(names: string[], options?: { cnOnly?: boolean }): { key: string; cert: string };
}

const freshKeys = () => {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    privatePem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    forgePrivate: forge.pki.privateKeyFromPem(privateKey.export({ type: 'pkcs1', format: 'pem' }).toString()),
    forgePublic: forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }).toString()),
  };
};

const validity = (cert: forge.pki.Certificate) => {
  // Test certificates only: the wall clock is the TLS stack's, not the appliance's injected clock.
  cert.validity.notBefore = new Date(Date.now() - 3_600_000);
  cert.validity.notAfter = new Date(Date.now() + 24 * 3_600_000);
};

let serial = 1;

export function createTestCa(commonName = 'Postino Test CA'): TestCa {
  const caKeys = freshKeys();
  const ca = forge.pki.createCertificate();
  ca.publicKey = caKeys.forgePublic;
  ca.serialNumber = String(serial++).padStart(2, '0');
  validity(ca);
  const caSubject = [{ name: 'commonName', value: commonName }];
  ca.setSubject(caSubject);
  ca.setIssuer(caSubject);
  ca.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  ca.sign(caKeys.forgePrivate, forge.md.sha256.create());
  return {
    certPem: forge.pki.certificateToPem(ca),
    issue(names, { cnOnly = false } = {}) {
      const keys = freshKeys();
      const cert = forge.pki.createCertificate();
      cert.publicKey = keys.forgePublic;
      cert.serialNumber = String(serial++).padStart(2, '0');
      validity(cert);
      cert.setSubject([{ name: 'commonName', value: names[0] }]);
      cert.setIssuer(caSubject);
      cert.setExtensions([
        { name: 'basicConstraints', cA: false },
        { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
        { name: 'extKeyUsage', serverAuth: true },
        ...(cnOnly ? [] : [{ name: 'subjectAltName', altNames: names.map((value) => ({ type: 2, value })) }]),
        { name: 'authorityKeyIdentifier', keyIdentifier: ca.generateSubjectKeyIdentifier().getBytes() },
      ]);
      cert.sign(caKeys.forgePrivate, forge.md.sha256.create());
      return { key: keys.privatePem, cert: forge.pki.certificateToPem(cert) };
    },
  };
}
