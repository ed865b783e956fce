/**
 * Hash routing (`/#/devices/12`): the server serves one page at `/`, every route lives after the
 * `#`, so no server route can clash with a console route. Pages are registered in pages/index.ts.
 */
import { useEffect, useState } from "preact/hooks";
import type { ComponentType } from "preact";
import type { Me } from "./session.ts";

export interface PageProps {
  /** `:name` parts of the path. */
  params: Record<string, string>;
  /** The query after `?` in the hash (`#/devices?q=abc`). */
  query: URLSearchParams;
  me: Me;
}

export interface Page {
  /** `/devices`, `/devices/:id` */
  path: string;
  /** The document title (and the heading a page may show). */
  title: string;
  component: ComponentType<PageProps>;
  /** In the navigation: under `section`, in `order` (pages without nav are reached by links). */
  nav?: { section: Section; label: string; order: number };
  /** Only for accounts for which this is true (also hides the nav entry). */
  visible?: (me: Me) => boolean;
}

/** The navigation's sections, in this order. */
export const SECTIONS = ["Update server", "Test runs", "Administration"] as const;
export type Section = (typeof SECTIONS)[number];

export interface Location {
  path: string;
  query: URLSearchParams;
}

export function currentLocation(): Location {
  const hash = window.location.hash.replace(/^#/, "") || "/";
  const [path, query = ""] = hash.split("?", 2) as [string, string?];
  return { path: path.startsWith("/") ? path : `/${path}`, query: new URLSearchParams(query) };
}

/** The current location; re-renders on navigation. */
export function useLocation(): Location {
  const [location, setLocation] = useState(currentLocation);
  useEffect(() => {
    const update = () => setLocation(currentLocation());
    window.addEventListener("hashchange", update);
    return () => window.removeEventListener("hashchange", update);
  }, []);
  return location;
}

/** `href` for a console route: `<a href={href("/devices/3")}>`. */
export const href = (path: string, query?: Record<string, string | number | undefined>): string => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== "") q.set(k, String(v));
  const text = q.toString();
  return `#${path}${text ? `?${text}` : ""}`;
};

export const navigate = (path: string, query?: Record<string, string | number | undefined>) => {
  window.location.hash = href(path, query).slice(1);
};

/** Replaces the query of the current route without a history entry (filters, paging). */
export const replaceQuery = (query: Record<string, string | number | undefined>) => {
  const { path } = currentLocation();
  history.replaceState(null, "", href(path, query));
  window.dispatchEvent(new HashChangeEvent("hashchange"));
};

/** The page whose path matches, with its params. */
export function match(pages: Page[], path: string): { page: Page; params: Record<string, string> } | undefined {
  const parts = path.split("/").filter(Boolean);
  for (const page of pages) {
    const pattern = page.path.split("/").filter(Boolean);
    if (pattern.length !== parts.length) continue;
    const params: Record<string, string> = {};
    if (pattern.every((p, i) => (p.startsWith(":") ? ((params[p.slice(1)] = decodeURIComponent(parts[i]!)), true) : p === parts[i]))) return { page, params };
  }
  return undefined;
}
