/**
 * The baseline of bench:upload: the least a Node server must do to take an upload durably. A
 * plain node:http server that streams each POST body through SHA-256 into a new file under DIR,
 * fsyncs it and answers the digest: no framework, no multipart parsing, no database.
 *
 *   node --import tsx scripts/bench/bare-upload.ts DIR     (prints "listening on URL")
 */
import { createHash, randomUUID } from "node:crypto";
import { createWriteStream } from "node:fs";
import { open } from "node:fs/promises";
import { createServer } from "node:http";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";

const dir = process.argv[2];
const server = createServer(async (req, res) => {
  const path = join(dir, randomUUID());
  const hash = createHash("sha256");
  req.on("data", (chunk: Buffer) => hash.update(chunk));
  try {
    // Writes of up to 1 MiB, as labgate stages uploads (the default 16 KiB would handicap it).
    await pipeline(req, createWriteStream(path, { flags: "wx", mode: 0o600, highWaterMark: 1024 * 1024 }));
    const file = await open(path, "r");
    await file.sync();
    await file.close();
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ sha256: hash.digest("hex") }));
  } catch (error) {
    res.writeHead(500).end(String(error));
  }
});
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  if (address && typeof address === "object") process.stdout.write(`listening on http://127.0.0.1:${address.port}\n`);
});
