import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Agent, fetch as undiciFetch } from "undici";

export type KeyKind = "rsa" | "ec" | "ed25519";

const GENPKEY: Record<KeyKind, string[]> = {
  rsa: ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
  ec: ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
  ed25519: ["-algorithm", "ED25519"],
};

export interface TestCert {
  cert: string;
  key: string;
}

const openssl = (args: string[]) => execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });

/**
 * A certificate for 127.0.0.1 and localhost, made now with openssl (test fixtures only: nothing
 * is committed). Self-signed, or signed by `ca` when given.
 */
export function makeCert(dir: string, name: string, kind: KeyKind = "ec", ca?: TestCert): TestCert {
  const key = join(dir, `${name}.key`);
  const cert = join(dir, `${name}.pem`);
  openssl(["genpkey", ...GENPKEY[kind], "-out", key]);
  const san = "subjectAltName=IP:127.0.0.1,DNS:localhost";
  if (!ca) {
    openssl(["req", "-x509", "-new", "-key", key, "-out", cert, "-days", "2", "-subj", `/CN=${name}`, "-addext", san]);
  } else {
    const csr = join(dir, `${name}.csr`);
    const ext = join(dir, `${name}.ext`);
    writeFileSync(ext, `${san}\n`);
    openssl(["req", "-new", "-key", key, "-out", csr, "-subj", `/CN=${name}`]);
    openssl(["x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext]);
  }
  return { cert, key };
}

/** fetch that trusts only the certificates in `caFile`. */
export function trustingFetch(caFile: string): typeof fetch {
  const dispatcher = new Agent({ connect: { ca: readFileSync(caFile) } });
  return async (input, init = {}) => {
    if (init.body instanceof FormData) {
      // undici's own fetch does not know Node's built-in FormData class: send it encoded.
      const encoded = new Response(init.body);
      const headers = new Headers(init.headers);
      headers.set("content-type", encoded.headers.get("content-type")!);
      init = { ...init, headers, body: Buffer.from(await encoded.arrayBuffer()) };
    }
    const options = { ...(init as Parameters<typeof undiciFetch>[1]), dispatcher };
    return undiciFetch(input as Parameters<typeof undiciFetch>[0], options) as unknown as Promise<Response>;
  };
}
