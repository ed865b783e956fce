import type { Migration } from "../migrate.ts";
import { m001Core } from "./001_core.ts";
import { m002Testrun } from "./002_testrun.ts";
import { m003Devices } from "./003_devices.ts";
import { m004PackagesGroups } from "./004_packages_groups.ts";
import { m005DeviceChannel } from "./005_device_channel.ts";
import { m006ProgressUpdated } from "./006_progress_updated.ts";
import { m008TokenRevocations } from "./008_token_revocations.ts";
import { m009Accounts } from "./009_accounts.ts";
import { m010DeviceLogs } from "./010_device_logs.ts";
import { m011RegistrationBounds } from "./011_registration_bounds.ts";
import { m012ActionOutputInline } from "./012_action_output_inline.ts";
import { m014AccessGeneration } from "./014_access_generation.ts";
import { m015DeviceLogBytes } from "./015_device_log_bytes.ts";
import { m016Deployments } from "./016_deployments.ts";
import { m017UpdateHistory } from "./017_update_history.ts";
import { m018AuditLog } from "./018_audit_log.ts";
import { m020DeviceTestRuns } from "./020_device_test_runs.ts";
import { m021DeploymentValidation } from "./021_deployment_validation.ts";
import { m022AuditSpool } from "./022_audit_spool.ts";
import { m023DeploymentIdempotence } from "./023_deployment_idempotence.ts";
import { m024DeploymentAttempts } from "./024_deployment_attempts.ts";
import { m026ValidationCopy } from "./026_validation_copy.ts";
import { m028AuditRefusals } from "./028_audit_refusals.ts";
import { m029Lab } from "./029_lab.ts";
import { m030LabAttempts } from "./030_lab_attempts.ts";

/** Every schema step in order. Append new numbered files; never edit a released one. */
export const migrations: Migration[] = [m001Core, m002Testrun, m003Devices, m004PackagesGroups, m005DeviceChannel, m006ProgressUpdated, m008TokenRevocations, m009Accounts, m010DeviceLogs, m011RegistrationBounds, m012ActionOutputInline, m014AccessGeneration, m015DeviceLogBytes, m016Deployments, m017UpdateHistory, m018AuditLog, m020DeviceTestRuns, m021DeploymentValidation, m022AuditSpool, m023DeploymentIdempotence, m024DeploymentAttempts, m026ValidationCopy, m028AuditRefusals, m029Lab, m030LabAttempts];
