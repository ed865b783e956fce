/** Shapes of the API's answers the pages read (see /api/openapi.json). */

export interface Device {
  id: number;
  name: string;
  mac_address: string;
  capabilities: Record<string, unknown>;
  metadata: Record<string, unknown>;
  last_access: string | null;
  public_key: string;
  groups: number[];
  connected: boolean;
}

export interface Group {
  id: number;
  metadata: Record<string, unknown>;
  policy: string;
  priority: number;
  packages: number[];
  devices: number[];
}
