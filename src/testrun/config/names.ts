/**
 * Config store names: a flat store, so a name is a plain file
 * name of safe characters with a YAML extension. Anything else can never name a stored config,
 * which is what makes path traversal impossible.
 */
const CONFIG_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;
const YAML_EXTENSION = /\.ya?ml$/i;

/** True for an extension the store accepts (`.yml`/`.yaml`, any case). */
export const hasYamlExtension = (name: string): boolean => YAML_EXTENSION.test(name);

/** True for a name that may be stored and looked up. */
export const isConfigName = (name: unknown): name is string => typeof name === "string" && CONFIG_NAME.test(name) && YAML_EXTENSION.test(name);

/** Metadata names become artifact file names. */
export const isSafeFileName = (name: string): boolean => /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$/.test(name);
