import { createPrivateKey, X509Certificate, type KeyObject } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { ConfigError, type Config } from "../config/config.ts";

export interface TlsCredentials {
  cert: Buffer;
  key: Buffer;
}

function readKeyFile(path: string, key: string): Buffer {
  try {
    // The private key: readable by its owner and, at most, a group (0640 root:labgate is how the
    // service reads it); one every local user can read is no secret, and the server says so.
    if (key === "tls.key_file" && (statSync(path).mode & 0o004) !== 0) {
      throw new ConfigError(`config key ${key}: ${path} is readable by every user of this machine: chmod o-rwx ${path} (0600, or 0640 with the service's group)`);
    }
    return readFileSync(path);
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    throw new ConfigError(`config key ${key}: cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
}

/**
 * Reads `tls.cert_file` and `tls.key_file` and checks that they belong together, so that a bad
 * pair is refused at start (exit 2 naming the key) or on reload (the old pair stays).
 */
export function readTlsCredentials(tls: Config["tls"]): TlsCredentials {
  const cert = readKeyFile(tls.cert_file, "tls.cert_file");
  const key = readKeyFile(tls.key_file, "tls.key_file");
  let certificate: X509Certificate;
  try {
    certificate = new X509Certificate(cert);
  } catch (error) {
    throw new ConfigError(`config key tls.cert_file: ${tls.cert_file} is not a PEM certificate (${(error as Error).message})`);
  }
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(key);
  } catch (error) {
    throw new ConfigError(`config key tls.key_file: ${tls.key_file} is not a PEM private key (${(error as Error).message})`);
  }
  if (!certificate.checkPrivateKey(privateKey)) {
    throw new ConfigError(`config key tls.key_file: ${tls.key_file} does not match the certificate in ${tls.cert_file}`);
  }
  return { cert, key };
}
