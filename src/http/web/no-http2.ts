/**
 * What the server's bundle has instead of node:http2 (src/server/bundle.ts): labgate serves
 * HTTP/1.1 only, and @hono/node-server, which imports node:http2 at its top, uses it only to tell an
 * HTTP/2 request (`instanceof Http2ServerRequest`, never one here) and to close one's stream.
 * node:http2 loads nghttp2 and tls: 3.8 MB of an idle server's RSS (issue 31).
 */
export class Http2ServerRequest {}
export const constants = { NGHTTP2_NO_ERROR: 0 };
