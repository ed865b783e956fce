import { strict as assert } from "node:assert";
import { describe, test } from "node:test";
import { sql } from "kysely";
import type { AppContext } from "../../src/app/context.ts";
import type { Auth } from "../../src/auth/middleware.ts";
import { DatabaseUnavailableError } from "../../src/db/index.ts";
import { migrations } from "../../src/db/migrations/index.ts";
import { openDatabase } from "../../src/db/open.ts";
import { systemRoutes } from "../../src/http/system.ts";
import { errorAnswer } from "../../src/http/errors.ts";
import { systemClock } from "../../src/util/time.ts";
import { runCli } from "../helpers/cli.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { tempDir } from "../helpers/server.ts";

const postgres = usePostgres();

describe("serve --database-url", () => {
  test("a PostgreSQL it cannot reach (a closed port, a wrong password) ends the start with exit 2 naming database.url, well within 30 s, the password never shown", async () => {
    await postgres.createRole("operator", "right-password");
    const wrongPassword = postgres.url("postgres").replace("labgate@", "operator:hunter2@");
    for (const url of ["postgres://labgate:hunter2@127.0.0.1:1/labgate", wrongPassword]) {
      const started = Date.now();
      const serve = await runCli(["serve", "--database-url", url, "--data-dir", tempDir(), "--listen", "127.0.0.1:0"]);
      assert.ok(Date.now() - started < 30_000, `${url}: answered after ${Date.now() - started} ms`);
      assert.equal(serve.code, 2, serve.stderr);
      assert.match(serve.stderr, /database\.url: cannot use postgres:\/\/(labgate|operator):\*\*\*@127\.0\.0\.1:\d+\/\w+: /);
      assert.doesNotMatch(serve.stderr + serve.stdout, /hunter2/);
    }
  });

  test("a bad URL in LABGATE_DATABASE_URL exits 2 naming database.url, without the password", async () => {
    const serve = await runCli(["serve", "--data-dir", tempDir(), "--listen", "127.0.0.1:0"], { env: { LABGATE_DATABASE_URL: "mysql://root:hunter2@db/x" } });
    assert.equal(serve.code, 2);
    assert.match(serve.stderr, /LABGATE_DATABASE_URL \(database\.url\): expected postgres:\/\//);
    assert.doesNotMatch(serve.stderr, /hunter2/);
  });
});

describe("the PostgreSQL store", () => {
  test("opens migrated; a lost PostgreSQL makes queries throw DatabaseUnavailableError (a 503) and health degraded; it recovers by itself when PostgreSQL is back", async () => {
    const url = await postgres.createDatabase("lost");
    const logged: string[] = [];
    const opened = await openDatabase({ dataDir: tempDir(), url, log: (_level, message) => logged.push(message) });
    const { store } = opened;
    assert.equal(opened.db, undefined, "no embedded database on PostgreSQL");
    assert.deepEqual(opened.applied, migrations.map((m) => m.version).sort((a, b) => a - b));
    const newest = Math.max(...migrations.map((m) => m.version));
    const auth = { any: () => async (_c: unknown, next: () => Promise<void>) => next() } as unknown as Auth;
    const app = systemRoutes({ store, version: "test", clock: systemClock, startedAt: new Date() } as unknown as AppContext, auth);
    const health = async () => {
      const res = await app.request("/api/health");
      return { status: res.status, body: (await res.json()) as { status: string; database: Record<string, unknown> } };
    };
    const up = await health();
    assert.equal(up.status, 200);
    assert.deepEqual({ ...up.body.database, connections: undefined }, { engine: "postgres", schema_version: newest, state: "ok", connections: undefined });

    await sql`CREATE TABLE probe (n BIGINT NOT NULL)`.execute(store.query);
    const probe = store.query as unknown as import("kysely").Kysely<{ probe: { n: number } }>;
    await probe.insertInto("probe").values({ n: 1 }).execute();

    await postgres.halt();
    // A write in a transaction and one on its own, a read: each is unavailable, answered 503.
    await assert.rejects(store.transact(async (tx) => void (await (tx as unknown as typeof probe).insertInto("probe").values({ n: 2 }).execute())), (error: Error) => {
      assert.ok(error instanceof DatabaseUnavailableError, String(error));
      assert.equal(errorAnswer(error)?.status, 503);
      return true;
    });
    await assert.rejects(probe.insertInto("probe").values({ n: 3 }).execute(), DatabaseUnavailableError);
    await assert.rejects(probe.selectFrom("probe").selectAll().execute(), DatabaseUnavailableError);
    const down = await health();
    assert.equal(down.status, 503);
    assert.equal(down.body.status, "degraded");
    assert.equal(down.body.database.state, "failed");
    assert.equal(down.body.database.schema_version, newest);
    assert.match(String(down.body.database.error), /unavailable/);

    await postgres.start();
    await probe.insertInto("probe").values({ n: 4 }).execute();
    assert.deepEqual((await probe.selectFrom("probe").select("n").orderBy("n").execute()).map((r) => r.n), [1, 4]);
    assert.equal((await health()).status, 200);
    await opened.close();
  });

  test("the pool survives PostgreSQL ending a session it holds in a transaction (57P01): that transaction is unavailable, the next one commits", async () => {
    const url = await postgres.createDatabase("terminated");
    const opened = await openDatabase({ dataDir: tempDir(), url, log: () => {} });
    const { store } = opened;
    const failed = store.transact(async (tx) => {
      const pid = (await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(tx)).rows[0].pid;
      const other = await openDatabase({ dataDir: tempDir(), url, log: () => {} });
      await sql`SELECT pg_terminate_backend(${pid})`.execute(other.store.query);
      await other.close();
      await sql`SELECT 1`.execute(tx);
    });
    await assert.rejects(failed, DatabaseUnavailableError);
    assert.equal(await store.transact(async (tx) => (await sql<{ one: number }>`SELECT 1 AS one`.execute(tx)).rows[0].one), 1);
    await opened.close();
  });
});
