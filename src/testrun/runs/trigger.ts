/** What a client asks to run: a config, a suite, where, with which overrides and pattern. */
export interface TriggerRequest {
  configName: string;
  suite: string;
  machineTarget: string | null;
  overrides: string | Record<string, unknown> | null;
  pattern: string;
  /** Join or create this trigger (sent by orchestrators). */
  triggerId?: string;
  /** Run the whole selection on each of these nodes at once (LOCAL_DEVICE: here); none: where the config says. */
  nodes?: string[];
}
