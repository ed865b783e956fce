/*
 * The gateways an agent knows (`server:` as a list: the nodes of a cluster). It uses one at a
 * time: a connect error, a 5xx answer or a closed socket moves it to the next; while it is not on
 * the first, it asks the first now and then (from retry_min_delay, doubling up to retry_max_delay)
 * and goes back once it answers. Requests are written for the first URL; the client here sends
 * each to the one in use.
 */
import type { HttpClient } from "../update/client/http.ts";
import type { Logger } from "../util/log.ts";

export class ServerList {
  readonly urls: readonly string[];
  private index = 0;
  private readonly log: Logger;
  private readonly minDelay: number;
  private readonly maxDelay: number;
  /** Seconds before the next try of the first server, while another is in use. */
  private returnDelay: number;

  constructor(urls: readonly string[], log: Logger, delays: { min: number; max: number }) {
    this.urls = urls;
    this.log = log;
    this.minDelay = delays.min;
    this.maxDelay = delays.max;
    this.returnDelay = delays.min;
  }

  /** The base URL in use. */
  current(): string {
    return this.urls[this.index];
  }

  /** Whether the first server is not the one in use. */
  get away(): boolean {
    return this.index !== 0;
  }

  /** `url` (a base URL) failed: the next one is used from now on, unless another failure moved on already. */
  failed(url: string, why: string): void {
    if (this.urls.length < 2 || url !== this.current()) return;
    const from = this.current();
    this.index = (this.index + 1) % this.urls.length;
    this.log.warn(`agent: ${from} failed (${why}); using ${this.current()}`);
  }

  /** The wait before the next try of the first server (doubling at each call, up to retry_max_delay). */
  nextReturnDelay(): number {
    const delay = this.returnDelay;
    this.returnDelay = Math.min(this.maxDelay, this.returnDelay * 2);
    return delay;
  }

  /** The first server answered: it is used again. */
  returned(): void {
    if (this.index === 0) return;
    this.log.info(`agent: ${this.urls[0]} answers again; using it instead of ${this.current()}`);
    this.index = 0;
    this.returnDelay = this.minDelay;
  }

  /** The configured server a URL is on (its base), if any. */
  baseOf(url: string): string | undefined {
    return this.urls.find((base) => url === base || url.startsWith(`${base}/`) || url.startsWith(`${base}?`));
  }

  /**
   * `http` for requests to any of the servers: each goes to the one in use, and a connect error,
   * a closed connection or a 5xx answer moves on to the next (the caller retries). Other URLs
   * (an object store's presigned links) go as they are.
   */
  client(http: HttpClient): HttpClient {
    if (this.urls.length < 2) return http;
    return async (url, request) => {
      const base = this.baseOf(url);
      if (base === undefined) return http(url, request);
      const using = this.current();
      const target = using + url.slice(base.length);
      let answer;
      try {
        answer = await http(target, request);
      } catch (error) {
        if (!request?.signal?.aborted) this.failed(using, (error as Error).message || (error as NodeJS.ErrnoException).code || "connection failed");
        throw error;
      }
      if (answer.status >= 500) this.failed(using, `answered ${answer.status}`);
      return answer;
    };
  }
}
