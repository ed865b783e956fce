/**
 * The project's documents link to files that exist: a link is resolved from the folder of the
 * document it is in (GitHub's rule), so `docs/x.md` linking `docs/y.md` points at `docs/docs/y.md`.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";

const ROOT = new URL("../..", import.meta.url).pathname;

function markdownFiles(): string[] {
  const inDocs = (dir: string): string[] =>
    readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? inDocs(join(dir, e.name)) : e.name.endsWith(".md") ? [join(dir, e.name)] : []));
  return ["README.md", ...inDocs("docs")];
}

/** Relative link targets of a markdown text (no URLs with a scheme, no anchors within the page). */
export function relativeLinks(text: string): string[] {
  return [...text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)].map((m) => m[1]!).filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

test("every relative link in README.md and docs/ names a file that exists, seen from the linking file's folder", () => {
  const broken = markdownFiles().flatMap((file) =>
    relativeLinks(readFileSync(join(ROOT, file), "utf8"))
      .filter((target) => !existsSync(join(ROOT, dirname(file), target)))
      .map((target) => `${file} -> ${target}`),
  );
  assert.deepEqual(broken, []);
});

test("the link finder takes relative targets and leaves URLs and anchors", () => {
  assert.deepEqual(relativeLinks("see [a](docs/a.md#x), [b](https://example.org/b.md), [c](#top), [d](../d.md)"), ["docs/a.md", "../d.md"]);
});
