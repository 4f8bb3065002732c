// Vitest configuration to run OpenClaw's exec-supervisor suites against
// the exec-supervisor binary, unchanged: copy it into an OpenClaw
// checkout (or point --config at it from there) and run
//
//   EXEC_SUPERVISOR_BIN=/path/to/exec-supervisor \
//   EXEC_SUPERVISOR_SHIM=/path/to/exec-supervisor/tools/openclaw/start-supervisor.mjs \
//     npx vitest run --config vitest.config.mjs
//
// The suites import startSupervisor from "./server.js": that import is
// resolved to the shim, which starts the binary instead of the Node
// server. Files run one at a time (client.test and perf.test share
// ports 19890/19891, v2.test and dispatcher.test 19990/19991).
//
// A plain object, not defineConfig from "vitest/config": this file is
// loaded from where it lies, outside the checkout whose node_modules holds
// vitest, so it imports nothing.

const shim = process.env.EXEC_SUPERVISOR_SHIM;
if (!shim) {
  throw new Error("set EXEC_SUPERVISOR_SHIM to the path of tools/openclaw/start-supervisor.mjs");
}

export default {
  resolve: {
    alias: [{ find: /^\.\/server\.js$/, replacement: shim }],
  },
  test: {
    include: ["src/process/exec-supervisor/*.test.ts"],
    fileParallelism: false,
    testTimeout: 120000,
  },
};
