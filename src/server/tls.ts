import { createPrivateKey, X509Certificate, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import { ConfigError, type Config } from "../config/config.ts";

export interface TlsCredentials {
  cert: Buffer;
  key: Buffer;
}

function readKeyFile(path: string, key: string): Buffer {
  try {
    return readFileSync(path);
  } catch (error) {
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
