/*
 * The agent's identity towards the server: its key, the device client that signs authorization
 * requests, the clock correction learnt from the server's `Date` headers, and the wait for
 * approval.
 */
import { join } from "node:path";
import { DeviceClient, loadOrCreateDeviceKey, type Metadata } from "../update/client/device-client.ts";
import type { HttpAnswer, HttpRequest } from "../update/client/http.ts";
import type { Logger } from "../util/log.ts";
import type { Clock } from "../util/time.ts";
import type { AgentConfig } from "./config.ts";
import type { ServerTransport } from "./transport.ts";

/** The device key's file in the agent's data dir. */
export const DEVICE_KEY_FILE = "device-key.pem";

/** Why a request failed: its message, else its code (a refused dual-stack connect is an AggregateError without a message). */
export const reason = (error: unknown): string => (error as Error).message || (error as NodeJS.ErrnoException).code || String(error);

export class Registration {
  readonly client: DeviceClient;
  /** Seconds to add to the device's clock to get the server's (learnt from `Date` headers). */
  private clockOffset = 0;
  private accepted = false;
  private readonly config: AgentConfig;
  private readonly log: Logger;
  private readonly transport: ServerTransport;
  private readonly clock: Clock;

  /** `clock`: the device's clock (tests skew it). */
  constructor(config: AgentConfig, log: Logger, transport: ServerTransport, clock: Clock, metadata: Metadata) {
    this.config = config;
    this.log = log;
    this.transport = transport;
    this.clock = clock;
    this.client = new DeviceClient({
      server: config.server,
      privateKeyPem: loadOrCreateDeviceKey(join(config.data_dir, DEVICE_KEY_FILE), config.key_type).privateKeyPem,
      metadata,
      prefix: config.prefix,
      now: () => Math.floor(this.clock.now() / 1000) + this.clockOffset,
      http: (url, request) => this.requestNoting(url, request),
    });
  }

  /** Authorizes until the server accepts the device (pending: someone has to approve it). */
  async untilAccepted(wait: { sleep(seconds: number): Promise<void>; nextDelay(previous: number): number; stopped(): boolean }): Promise<boolean> {
    let delay = this.config.retry_min_delay;
    while (!wait.stopped()) {
      try {
        const outcome = await this.client.authorize();
        if (outcome.status === "accepted") {
          if (!this.accepted) this.log.info(`agent: device ${this.config.mac_address} is accepted`);
          this.accepted = true;
          return true;
        }
        this.log.info(`agent: device ${this.config.mac_address} waits for approval`);
      } catch (error) {
        this.log.warn(`agent: authorization failed: ${reason(error)}`);
      }
      await wait.sleep(delay);
      delay = wait.nextDelay(delay);
    }
    return false;
  }

  /** A token for the socket, or undefined (logged) when authorization failed. */
  async token(): Promise<string | undefined> {
    try {
      return await this.client.getToken();
    } catch (error) {
      this.log.warn(`agent: authorization failed: ${reason(error)}`);
      return undefined;
    }
  }

  /**
   * Lab devices often boot without a real-time clock or NTP: the signed auth timestamp would fall
   * outside the server's window. The server's `Date` header tells how far off this clock is.
   */
  private async requestNoting(url: string, request?: HttpRequest): Promise<HttpAnswer> {
    const response = await this.transport.http(url, request);
    const date = Date.parse(response.headers.date ?? "");
    if (Number.isFinite(date)) {
      const offset = Math.round((date - this.clock.now()) / 1000);
      // Date has whole seconds: follow only a real difference.
      if (Math.abs(offset - this.clockOffset) > 30) {
        this.log.warn(`agent: the device clock is ${Math.abs(offset)} s ${offset > 0 ? "behind" : "ahead of"} the server's; using the server's time`);
        this.clockOffset = offset;
        this.client?.clockCorrected();
      }
    }
    return response;
  }
}
