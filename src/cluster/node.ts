/*
 * A node of a cluster on PostgreSQL (docs/cluster.md). Each node holds one session of its own
 * beside the store's pool: it beats in `cluster_nodes`, holds its jobs as session advisory locks
 * (PostgreSQL releases them the moment the session ends, so a dead node's jobs are free at once,
 * and two sessions never hold one lock), records the devices whose sockets it holds, and listens
 * for the other nodes' messages (LISTEN/NOTIFY). Loaded only from PostgreSQL's part.
 */
import { randomUUID } from "node:crypto";
import type { Client, QueryResult, QueryResultRow } from "pg";
import { JOBS, type Cluster, type Job, type NodeView, type PeerNode, type Topic } from "./cluster.ts";

/** The advisory locks' first key: labgate's jobs ("lg"); the second is the job's place in JOBS, plus one. */
const LOCK_SPACE = 0x6c67;
/** How often a node beats and tries the jobs it does not hold. */
const BEAT_MS = 2000;
/** A node that has not beaten for this long is down: its devices no longer count and its session is ended. */
export const DOWN_AFTER_MS = 8000;
/** Wait before a lost session is opened again. */
const RECONNECT_MS = 1000;
/** How long a node whose session is gone has to answer at its advertise_url before it counts as lost. */
const PROBE_MS = 2000;
/** The errors of a request to a node that say its process is not there (any answer, even a TLS refusal, says it is). */
const GONE_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "UND_ERR_SOCKET", "UND_ERR_CONNECT_TIMEOUT"]);
/** The NOTIFY channel of every node. */
const CHANNEL = "labgate_cluster";
/** PostgreSQL's own bound on a NOTIFY payload is 8000 bytes. */
const MAX_PAYLOAD = 7900;
/**
 * The form of NOTIFY payload this build writes and reads, in its `cluster_nodes` row: 2, a list of
 * messages; 1, one message, the only form the build before reads (it sends only that form too).
 */
const MESSAGE_FORMAT = 2;
/** Messages of the one-message form sent by one statement (each its own notification). */
const SINGLES_PER_STATEMENT = 100;
/** The database's clock in ms: every node's times are read on one clock. */
const NOW_MS = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

export interface ClusterNodeOptions {
  url: string;
  name: string;
  advertiseUrl: string;
  version: string;
  log: (level: "info" | "warn" | "error", message: string) => void;
  /** A short-lived token for calls to the other nodes (the nodes share their signing keys). */
  peerToken: () => string;
}

/** Another node's row as a beat reads it. */
interface PeerRow {
  name: string;
  advertise_url: string;
  instance: string;
  stopped: number;
  /** It has not beaten within DOWN_AFTER_MS. */
  silent: boolean;
  /** Its recorded session is not open in PostgreSQL. */
  sessionless: boolean;
  /** The NOTIFY form it reads (1: one message a payload, the build before lists). */
  message_format: number;
}

/** MACs per presence message: each well within NOTIFY's payload bound. */
const PRESENCE_BATCH = 200;

/** A message from one node to the others. */
type Message =
  | { from: string; topic: Topic; data?: unknown }
  /** Device sockets that opened or closed on node `node`; `reset`: forget every socket it held before. */
  | { from: string; topic: "presence"; node: string; opened: string[]; closed: string[]; reset?: boolean };

/**
 * The node's own pg client, its queries sent one at a time in the order asked: the beat, the
 * presence writes, the outbox and the view share it, and pg deprecates (pg 9 refuses) a query sent
 * while another runs.
 */
class Session {
  readonly client: Client;
  private tail: Promise<unknown> = Promise.resolve();

  constructor(client: Client) {
    this.client = client;
  }

  query<R extends QueryResultRow = QueryResultRow>(text: string, values?: unknown[]): Promise<QueryResult<R>> {
    const result = this.tail.then(() => this.client.query<R>(text, values));
    this.tail = result.catch(() => {});
    return result;
  }

  end(): Promise<void> {
    return this.client.end();
  }
}

export async function startClusterNode(options: ClusterNodeOptions): Promise<Cluster> {
  const node = new ClusterNode(options);
  await node.join();
  return node;
}

class ClusterNode implements Cluster {
  readonly name: string;
  private readonly instance = randomUUID();
  private readonly options: ClusterNodeOptions;
  private session: Session | undefined;
  private readonly held = new Set<Job>();
  private readonly takenHooks = new Map<Job, Array<() => void>>();
  private readonly handlers = new Map<Topic, Array<(data: unknown) => void>>();
  /** Device sockets opened (true) or closed (false) here since the last write of them. */
  private readonly presence = new Map<string, boolean>();
  private flushing: Promise<void> | undefined;
  /** Where the other nodes' device sockets are, by MAC: the node's name. */
  private readonly remote = new Map<string, string>();
  /** The other nodes' advertise URLs, by name (read at each beat). */
  private readonly peers = new Map<string, string>();
  /** What this node last read of each other node: the process under its name, whether it is known gone, whether a probe is out. */
  private readonly watched = new Map<string, { instance: string; lost: boolean; probing: boolean }>();
  private readonly lostHooks: Array<(name: string) => void> = [];
  private beating: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Set once another process took this node's name, or at close: the node does no more. */
  private ended = false;

  constructor(options: ClusterNodeOptions) {
    this.name = options.name;
    this.options = options;
  }

  /** Opens the session, takes the node's name (ending the session of an earlier process under it) and starts beating. */
  async join(): Promise<void> {
    await this.connect();
    this.timer = setInterval(() => void this.beat(), BEAT_MS);
    this.timer.unref();
    await this.beat();
  }

  runs(job: Job): boolean {
    return this.held.has(job);
  }

  onTaken(job: Job, hook: () => void): void {
    this.takenHooks.set(job, [...(this.takenHooks.get(job) ?? []), hook]);
  }

  publish(topic: Topic, data?: unknown): void {
    this.notify({ from: this.instance, topic, data });
  }

  on(topic: Topic, handler: (data: unknown) => void): void {
    this.handlers.set(topic, [...(this.handlers.get(topic) ?? []), handler]);
  }

  deviceConnected(mac: string): void {
    this.presence.set(mac, true);
    this.flushPresence();
  }

  deviceDisconnected(mac: string): void {
    this.presence.set(mac, false);
    this.flushPresence();
  }

  locate(mac: string): PeerNode | undefined {
    const name = this.remote.get(mac);
    return name === undefined ? undefined : { name, url: this.peers.get(name) ?? "" };
  }

  onNodeLost(hook: (name: string) => void): void {
    this.lostHooks.push(hook);
  }

  peerToken(): string {
    return this.options.peerToken();
  }

  async nodes(): Promise<NodeView[]> {
    const rows = await this.query<{ name: string; advertise_url: string; stopped: number; heartbeat_at: string; now: string; connected_devices: string; jobs: number[] | null }>(
      `SELECT n.name, n.advertise_url, n.stopped, n.heartbeat_at, ${NOW_MS} AS now,
              (SELECT count(*) FROM cluster_devices d WHERE d.node = n.name) AS connected_devices,
              (SELECT array_agg(l.objid::bigint::int ORDER BY l.objid::bigint) FROM pg_locks l
                WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = $1 AND l.objsubid = 2 AND l.pid = n.session_pid) AS jobs
         FROM cluster_nodes n ORDER BY n.name`,
      [LOCK_SPACE],
    );
    return rows.map((row) => {
      const fresh = Number(row.now) - Number(row.heartbeat_at) < DOWN_AFTER_MS;
      const state = Number(row.stopped) ? "stopped" : fresh ? "up" : "down";
      return {
        name: row.name,
        advertise_url: row.advertise_url,
        state,
        connected_devices: state === "up" ? Number(row.connected_devices) : 0,
        jobs: state === "up" ? (row.jobs ?? []).map((key) => JOBS[key - 1]).filter((job) => job !== undefined) : [],
      };
    });
  }

  async close(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    clearInterval(this.timer);
    await this.beating;
    await this.flushing;
    this.held.clear();
    const session = this.session;
    this.session = undefined;
    if (!session) return;
    // What this node still had to say goes before it leaves.
    if (this.outbox.session === session) this.flushOutbox();
    await session
      .query(`UPDATE cluster_nodes SET stopped = 1, heartbeat_at = ${NOW_MS} WHERE name = $1 AND instance = $2`, [this.name, this.instance])
      .then(() => session.query(`DELETE FROM cluster_devices WHERE instance = $1`, [this.instance]))
      .catch((error: Error) => this.options.log("warn", `cluster: leaving: ${error.message}`));
    // Ending the session releases every advisory lock it holds.
    await session.end().catch(() => {});
  }

  /** The node's own session: keepalives short enough that PostgreSQL ends it soon after the machine goes. */
  private async connect(): Promise<void> {
    const { default: pg } = await import("pg");
    const client = new pg.Client({ connectionString: this.options.url, keepAlive: true, keepAliveInitialDelayMillis: 1000, application_name: this.applicationName });
    const session = new Session(client);
    client.on("error", () => this.lost(session));
    client.on("end", () => this.lost(session));
    client.on("notification", (message) => {
      if (message.channel === CHANNEL && message.payload) this.received(message.payload);
    });
    await client.connect();
    await session.query(`SET tcp_keepalives_idle = 2; SET tcp_keepalives_interval = 1; SET tcp_keepalives_count = 3`);
    if (this.joined) {
      // Back after a lost session: the name is still this process's, unless another took it meanwhile.
      const held = await session.query(`UPDATE cluster_nodes SET session_pid = pg_backend_pid(), heartbeat_at = ${NOW_MS} WHERE name = $1 AND instance = $2`, [this.name, this.instance]);
      if (held.rowCount === 0) return this.replaced(session);
    } else {
      await this.claim(session);
    }
    await session.query(`LISTEN ${CHANNEL}`);
    // What the others hold, read after listening: a change from then on arrives as a message.
    const others = await session.query<{ mac_address: string; node: string }>(`SELECT mac_address, node FROM cluster_devices WHERE node <> $1`, [this.name]);
    for (const row of others.rows) this.remote.set(row.mac_address, row.node);
    if (!this.joined) this.send(session, { from: this.instance, topic: "presence", node: this.name, opened: [], closed: [], reset: true });
    this.session = session;
    this.joined = true;
    // The devices of this process recorded again: a session lost meanwhile may have missed some.
    if (this.presence.size > 0) this.flushPresence();
  }

  /** Whether this process has held its name (a later session only takes it back). */
  private joined = false;

  /** Takes the node's name in cluster_nodes. */
  private async claim(session: Session): Promise<void> {
    // A process that ran under this name before (it crashed, or its machine went) gives its place now: its session ends, and with it its locks.
    const before = await session.query<{ session_pid: number | null }>(`SELECT session_pid FROM cluster_nodes WHERE name = $1 AND instance <> $2`, [this.name, this.instance]);
    const pid = before.rows[0]?.session_pid;
    if (pid) await session.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2`, [pid, this.applicationName]);
    await session.query(
      `INSERT INTO cluster_nodes (name, instance, advertise_url, version, started_at, heartbeat_at, stopped, session_pid, message_format)
         VALUES ($1, $2, $3, $4, ${NOW_MS}, ${NOW_MS}, 0, pg_backend_pid(), $5)
       ON CONFLICT (name) DO UPDATE SET instance = EXCLUDED.instance, advertise_url = EXCLUDED.advertise_url, version = EXCLUDED.version,
         message_format = EXCLUDED.message_format,
         started_at = CASE WHEN cluster_nodes.instance = EXCLUDED.instance THEN cluster_nodes.started_at ELSE EXCLUDED.started_at END,
         heartbeat_at = EXCLUDED.heartbeat_at, stopped = 0, session_pid = EXCLUDED.session_pid`,
      [this.name, this.instance, this.options.advertiseUrl, this.options.version, MESSAGE_FORMAT],
    );
    await session.query(`DELETE FROM cluster_devices WHERE node = $1 AND instance <> $2`, [this.name, this.instance]);
  }

  /** Another process took this node's name: this one does nothing more in the cluster. */
  private async replaced(session: Session): Promise<void> {
    this.options.log("error", `cluster: another process took the node name ${this.name}; this one leaves the cluster (give each node its own cluster.node_name)`);
    this.ended = true;
    clearInterval(this.timer);
    this.held.clear();
    this.session = undefined;
    await session.end().catch(() => {});
  }

  private get applicationName(): string {
    return `labgate node ${this.name}`;
  }

  /** The session went: its locks went with it, so the jobs stop now; it is opened again shortly. */
  private lost(session: Session): void {
    if (this.session !== session) return;
    this.session = undefined;
    if (this.held.size > 0) this.options.log("warn", `cluster: the node's session to PostgreSQL ended; its jobs (${[...this.held].join(", ")}) stop until it is back`);
    this.held.clear();
    if (this.ended) return;
    setTimeout(() => {
      if (!this.ended && !this.session) this.connect().catch((error: Error) => this.options.log("warn", `cluster: cannot reach PostgreSQL: ${error.message}`));
    }, RECONNECT_MS).unref();
  }

  /** One beat: the node's row, the jobs free to take, the devices of down nodes (by the sweep's holder). */
  private beat(): Promise<void> {
    this.beating ??= this.beatOnce()
      .catch((error: Error) => {
        if (!this.ended) this.options.log("warn", `cluster: beat failed: ${error.message}`);
      })
      .finally(() => (this.beating = undefined));
    return this.beating;
  }

  private async beatOnce(): Promise<void> {
    const session = this.session;
    if (this.ended || !session) return;
    const mine = await session.query(`UPDATE cluster_nodes SET heartbeat_at = ${NOW_MS}, session_pid = pg_backend_pid() WHERE name = $1 AND instance = $2`, [this.name, this.instance]);
    if (mine.rowCount === 0) return this.replaced(session);
    const peers = await session.query<PeerRow>(
      `SELECT n.name, n.advertise_url, n.instance, n.stopped, n.message_format, n.heartbeat_at < ${NOW_MS} - $2 AS silent,
              NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = n.session_pid) AS sessionless
         FROM cluster_nodes n WHERE n.name <> $1`,
      [this.name, DOWN_AFTER_MS],
    );
    for (const row of peers.rows) {
      this.peers.set(row.name, row.advertise_url);
      this.watch(row);
    }
    this.singles = peers.rows.some((row) => Number(row.stopped) === 0 && !row.silent && row.message_format < MESSAGE_FORMAT);
    for (const [index, job] of JOBS.entries()) {
      if (this.held.has(job)) continue;
      const taken = await session.query<{ taken: boolean }>(`SELECT pg_try_advisory_lock($1, $2) AS taken`, [LOCK_SPACE, index + 1]);
      if (!taken.rows[0]?.taken || this.session !== session) continue;
      this.held.add(job);
      this.options.log("info", `cluster: this node (${this.name}) runs ${job}`);
      for (const hook of this.takenHooks.get(job) ?? []) this.safely(hook, `taking ${job}`);
    }
    if (this.held.has("node_sweep")) await this.sweep(session);
  }

  /**
   * Notes what a beat read of another node, and tells the hooks once its process is gone: it
   * stopped, went silent, was replaced under its name, or its session ended and it does not
   * answer either (a killed process: its session ends at once, long before it counts as silent).
   */
  private watch(row: PeerRow): void {
    const known = this.watched.get(row.name);
    const gone = Number(row.stopped) === 1 || row.silent;
    if (!known) return void this.watched.set(row.name, { instance: row.instance, lost: gone, probing: false });
    if (known.instance !== row.instance) {
      // A restart under its name: what the process before held in memory is gone, whatever the new one's state.
      const before = known.lost;
      Object.assign(known, { instance: row.instance, lost: gone });
      // Its sockets are the new process's to record (it resets them as it joins).
      if (!before) this.lose(row.name, false);
      return;
    }
    if (known.lost) {
      known.lost = gone || row.sessionless;
      return;
    }
    if (gone) {
      known.lost = true;
      return this.lose(row.name, true);
    }
    if (row.sessionless && !known.probing && !this.ended) {
      known.probing = true;
      void this.answers(row.advertise_url).then((alive) => {
        known.probing = false;
        // A session can drop for a moment (the node opens it again within a second): only one that does not answer either is gone.
        if (alive || known.lost || known.instance !== row.instance || this.watched.get(row.name) !== known) return;
        known.lost = true;
        this.lose(row.name, true);
      });
    }
  }

  /** Whether a node's process answers at `url` at all (any HTTP answer, or a TLS refusal, is an answer). */
  private async answers(url: string): Promise<boolean> {
    if (!url) return false;
    try {
      const res = await fetch(`${url}/api/health`, { signal: AbortSignal.timeout(PROBE_MS) });
      await res.body?.cancel();
      return true;
    } catch (error) {
      const cause = (error as { cause?: { code?: string } }).cause;
      const name = (error as Error).name;
      return !(name === "TimeoutError" || name === "AbortError" || GONE_CODES.has(cause?.code ?? ""));
    }
  }

  /** `sockets`: what this node knew of its device sockets went with it (a restart records its own anew). */
  private lose(name: string, sockets: boolean): void {
    this.options.log("warn", `cluster: node ${name} is gone`);
    if (sockets) this.forget(name);
    for (const hook of this.lostHooks) this.safely(() => hook(name), `node ${name} lost`);
  }

  /** Nodes silent past DOWN_AFTER_MS: their sessions end (a hung process's locks go) and their devices no longer count. */
  private async sweep(session: Session): Promise<void> {
    // Never this node itself: its beat may be older than the bound by now, its messages queued on the session ahead of this query.
    const down = await session.query<{ name: string; session_pid: number | null }>(
      `SELECT name, session_pid FROM cluster_nodes WHERE stopped = 0 AND heartbeat_at < ${NOW_MS} - $1 AND name <> $2`,
      [DOWN_AFTER_MS, this.name],
    );
    for (const { name, session_pid: pid } of down.rows) {
      if (pid) await session.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2`, [pid, `labgate node ${name}`]);
      const gone = await session.query(`DELETE FROM cluster_devices WHERE node = $1`, [name]);
      if (gone.rowCount) {
        this.send(session, { from: this.instance, topic: "presence", node: name, opened: [], closed: [], reset: true });
        this.forget(name);
      }
    }
  }

  private flushPresence(): void {
    if (this.flushing || this.ended) return;
    this.flushing = (async () => {
      // Changes made while a write is under way go with the next one.
      while (this.presence.size > 0 && this.session && !this.ended) {
        const changes = [...this.presence];
        this.presence.clear();
        const opened = changes.filter(([, open]) => open).map(([mac]) => mac);
        const closed = changes.filter(([, open]) => !open).map(([mac]) => mac);
        try {
          if (opened.length > 0) {
            await this.session.query(
              `INSERT INTO cluster_devices (mac_address, node, instance) SELECT mac, $2, $3 FROM unnest($1::text[]) AS mac
               ON CONFLICT (mac_address) DO UPDATE SET node = EXCLUDED.node, instance = EXCLUDED.instance`,
              [opened, this.name, this.instance],
            );
          }
          if (closed.length > 0) await this.session.query(`DELETE FROM cluster_devices WHERE mac_address = ANY($1::text[]) AND instance = $2`, [closed, this.instance]);
          for (let i = 0; i < opened.length || i < closed.length; i += PRESENCE_BATCH) {
            this.send(this.session, { from: this.instance, topic: "presence", node: this.name, opened: opened.slice(i, i + PRESENCE_BATCH), closed: closed.slice(i, i + PRESENCE_BATCH) });
          }
        } catch (error) {
          // Kept for the next try (the session is opened again, and records them then).
          for (const [mac, open] of changes) if (!this.presence.has(mac)) this.presence.set(mac, open);
          this.options.log("warn", `cluster: device sockets not recorded: ${(error as Error).message}`);
          return;
        }
      }
    })().finally(() => (this.flushing = undefined));
  }

  private notify(message: Message): void {
    if (this.session) this.send(this.session, message);
  }

  /**
   * Queues `message` for the session: the messages of one turn go out packed into as few NOTIFYs
   * as their payload bound allows, so that a burst (every device of a node connecting) does not
   * queue a round trip per message on the session ahead of the node's beat.
   */
  private send(session: Session, message: Message): void {
    const payload = JSON.stringify(message);
    const bytes = Buffer.byteLength(payload);
    if (bytes + 2 > MAX_PAYLOAD) return this.options.log("error", `cluster: a ${message.topic} message too large for NOTIFY was not sent`);
    if (this.outbox.session !== session) this.outbox = { session, payloads: [], scheduled: false };
    this.outbox.payloads.push({ payload, bytes });
    if (this.outbox.scheduled) return;
    this.outbox.scheduled = true;
    setImmediate(() => this.flushOutbox());
  }

  /** Whether a node of the build before is up (it reads only one message a payload): then this one writes that form. */
  private singles = true;

  private outbox: { session: Session | undefined; payloads: Array<{ payload: string; bytes: number }>; scheduled: boolean } = { session: undefined, payloads: [], scheduled: false };

  private flushOutbox(): void {
    const { session, payloads } = this.outbox;
    this.outbox = { session, payloads: [], scheduled: false };
    if (!session) return;
    if (this.singles) return this.notifySingles(session, payloads);
    const notify = (batch: string[]) => void session.query(`SELECT pg_notify($1, $2)`, [CHANNEL, `[${batch.join(",")}]`]).catch(this.unsent(batch.length));
    let batch: string[] = [];
    let size = 2;
    for (const { payload, bytes } of payloads) {
      if (batch.length > 0 && size + bytes + 1 > MAX_PAYLOAD) {
        notify(batch);
        batch = [];
        size = 2;
      }
      batch.push(payload);
      size += bytes + 1;
    }
    if (batch.length > 0) notify(batch);
  }

  /** The form of the build before: a notification per message, numbered, since PostgreSQL folds equal notifications of one statement. */
  private notifySingles(session: Session, payloads: Array<{ payload: string }>): void {
    for (let i = 0; i < payloads.length; i += SINGLES_PER_STATEMENT) {
      const batch = payloads.slice(i, i + SINGLES_PER_STATEMENT).map(({ payload }) => `${payload.slice(0, -1)},"n":${++this.numbered}}`);
      const calls = batch.map((_, j) => `pg_notify($1, $${j + 2})`).join(", ");
      session.query(`SELECT ${calls}`, [CHANNEL, ...batch]).catch(this.unsent(batch.length));
    }
  }

  /** The one-message form's running number (PostgreSQL folds equal notifications of one statement). */
  private numbered = 0;

  private unsent(count: number): (error: Error) => void {
    return (error) => this.options.log("warn", `cluster: ${count} message(s) not sent: ${error.message}`);
  }

  /** Drops what this node knew of `node`'s device sockets. */
  private forget(node: string): void {
    for (const [mac, holder] of this.remote) if (holder === node) this.remote.delete(mac);
  }

  private received(payload: string): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(payload);
    } catch {
      return;
    }
    // A list, or one message as a node of the build before sends it.
    for (const message of Array.isArray(parsed) ? parsed : [parsed]) if (message && typeof message === "object") this.receivedOne(message as Message);
  }

  private receivedOne(message: Message): void {
    if (message.from === this.instance) return;
    if (message.topic === "presence" && "node" in message) {
      if (message.node === this.name) return;
      if (message.reset) this.forget(message.node);
      for (const mac of message.closed ?? []) if (this.remote.get(mac) === message.node) this.remote.delete(mac);
      for (const mac of message.opened ?? []) this.remote.set(mac, message.node);
      return;
    }
    for (const handler of this.handlers.get(message.topic) ?? []) this.safely(() => handler(message.data), message.topic);
  }

  private async query<R extends QueryResultRow>(text: string, values: unknown[]): Promise<R[]> {
    if (!this.session) throw new Error("the node's session to PostgreSQL is not open");
    return (await this.session.query<R>(text, values)).rows;
  }

  private safely(hook: () => void, what: string): void {
    try {
      hook();
    } catch (error) {
      this.options.log("error", `cluster: ${what}: ${(error as Error).message}`);
    }
  }
}
