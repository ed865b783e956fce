import { m001Core } from "./001_core.ts";
import { m002Testrun } from "./002_testrun.ts";

export interface Migration {
  version: number;
  name: string;
  /** DDL and deterministic DML only: it is journaled and replayed like any other write. */
  sql: string[];
}

/** Every schema step in order. Append new numbered files; never edit a released one. */
export const migrations: Migration[] = [m001Core, m002Testrun];
