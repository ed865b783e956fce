/**
 * The package resolver, as pure logic: which of a group's packages
 * (in ascending id order) moves a device one hop along the shortest path from the version it
 * runs to the policy's target version.
 *
 * Nodes are version strings, edges are packages. A package is an edge from version `b` when it
 * is installable on top of `b`: its `requires:<key>` values match, its devtype matches and its
 * version differs. The device's own metadata decides the first hop; package metadata decides
 * the later ones. Fewest hops wins; ties go to the lowest index (breadth-first search over
 * edges in insertion order, the reference graph library's behaviour).
 *
 * Deliberate difference from the reference: edges leaving the running
 * version are only those checked against the device's metadata, never ones checked against
 * another package of the same version; and packages of another device type are ignored.
 */
export type Meta = Readonly<Record<string, unknown>>;

export interface ResolverKeys {
  version: string;
  devtype: string;
}

export const REQUIRES = "requires:";

const text = (value: unknown): string | undefined => (typeof value === "string" ? value : typeof value === "number" ? String(value) : undefined);

/** Is `pkg` installable on top of `base` (a device's or another package's metadata)? */
export function compatible(base: Meta, pkg: Meta, keys: ResolverKeys): boolean {
  for (const key of Object.keys(pkg)) {
    if (!key.startsWith(REQUIRES)) continue;
    const wanted = text(pkg[key]);
    const have = text(base[key.slice(REQUIRES.length)]);
    if (have === undefined || wanted === undefined || have !== wanted) return false;
  }
  const baseVersion = text(base[keys.version]);
  return baseVersion !== undefined && baseVersion !== text(pkg[keys.version]) && text(base[keys.devtype]) === text(pkg[keys.devtype]);
}

/**
 * Index (into `packages`) of the package to offer, or undefined for "no update": no target,
 * already at the target, the target not reachable, or nothing compatible.
 */
export function resolve(device: Meta, packages: readonly Meta[], target: string | undefined, keys: ResolverKeys): number | undefined {
  const start = text(device[keys.version]);
  const devtype = text(device[keys.devtype]);
  if (target === undefined || start === undefined || devtype === undefined || start === target) return undefined;

  const candidates: number[] = [];
  for (let i = 0; i < packages.length; i++) {
    if (text(packages[i][keys.devtype]) === devtype && text(packages[i][keys.version]) !== undefined) candidates.push(i);
  }
  if (!candidates.some((i) => text(packages[i][keys.version]) === target)) return undefined;

  // Adjacency in insertion order; the first edge between two versions keeps its label.
  const edges = new Map<string, Map<string, number>>();
  const addEdge = (from: string, to: string, label: number) => {
    let out = edges.get(from);
    if (!out) edges.set(from, (out = new Map()));
    if (!out.has(to)) out.set(to, label);
  };
  for (const i of candidates) if (compatible(device, packages[i], keys)) addEdge(start, text(packages[i][keys.version])!, i);
  for (const b of candidates) {
    const from = text(packages[b][keys.version])!;
    if (from === start) continue; // the first hop is the device's alone
    for (const i of candidates) if (compatible(packages[b], packages[i], keys)) addEdge(from, text(packages[i][keys.version])!, i);
  }

  const firstHop = new Map<string, string>([[start, start]]);
  const queue = [start];
  for (let head = 0; head < queue.length; head++) {
    const node = queue[head];
    for (const next of edges.get(node)?.keys() ?? []) {
      if (firstHop.has(next)) continue;
      const hop = node === start ? next : firstHop.get(node)!;
      if (next === target) return edges.get(start)!.get(hop);
      firstHop.set(next, hop);
      queue.push(next);
    }
  }
  return undefined;
}
