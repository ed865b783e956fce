/** A plain file name for an artifact a module writes: no directories, no leading dot, no quotes or commas. */
export const safeArtifactName = (name: string): boolean => /^[A-Za-z0-9_][A-Za-z0-9._-]*$/.test(name) && name.length <= 255;
