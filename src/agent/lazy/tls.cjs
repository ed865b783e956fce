// ws requires tls at its top level: the agent's bundle gets this stand-in instead (../bundle.ts), which loads it on first use.
module.exports = new Proxy({}, { get: (_, key) => process.getBuiltinModule("node:tls")[key] });
