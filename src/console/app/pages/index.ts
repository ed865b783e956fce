/**
 * Every page of the console. To add one: write pages/<name>.tsx exporting a `Page` (see
 * router.ts: path, title, component, nav entry, who may see it) and add it to this list.
 * ../README.md has the conventions.
 */
import type { Page } from "../router.ts";
import { auditPage } from "./audit.tsx";
import { clusterPage } from "./cluster.tsx";
import { deploymentPage, deploymentsPage } from "./deployments.tsx";
import { devicePage } from "./device.tsx";
import { devicesPage } from "./devices.tsx";
import { groupPage, groupsPage } from "./groups.tsx";
import { packagePage } from "./package.tsx";
import { packagesPage } from "./packages.tsx";
import { registrationsPage } from "./registrations.tsx";
import { usersPage } from "./users.tsx";
import { configPage, configsPage } from "./configs.tsx";
import { nodesPage } from "./nodes.tsx";
import { runPage } from "./run.tsx";
import { runsPage } from "./runs.tsx";
import { triggerPage } from "./trigger.tsx";
import { versionsPage } from "./versions.tsx";

export const pages: Page[] = [devicesPage, devicePage, registrationsPage, groupsPage, groupPage, deploymentsPage, deploymentPage, packagesPage, packagePage, versionsPage, usersPage, configsPage, configPage, runsPage, runPage, triggerPage, nodesPage, auditPage, clusterPage];
