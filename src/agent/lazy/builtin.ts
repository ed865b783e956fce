/** Function `name` of Node's built-in module `id`, loading the module at its first call (the agent's stand-ins, ../bundle.ts). */
export const lazyFunction = <M, K extends keyof M>(id: string, name: K): M[K] =>
  ((...args: unknown[]) => ((process.getBuiltinModule(id) as M)[name] as (...a: unknown[]) => unknown)(...args)) as M[K];
