/**
 * Every page of the console. To add one: write pages/<name>.tsx exporting a `Page` (see
 * router.ts: path, title, component, nav entry, who may see it) and add it to this list.
 * README.md beside app/ has the conventions.
 */
import type { Page } from "../router.ts";
import { devicesPage } from "./devices.tsx";

export const pages: Page[] = [devicesPage];
