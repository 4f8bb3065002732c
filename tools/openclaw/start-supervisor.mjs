// startSupervisor(config) for exec-supervisor: the API of OpenClaw's Node
// exec supervisor (src/process/exec-supervisor/server.ts), so that its test
// suites run against the exec-supervisor binary. It maps OpenClaw's config
// object onto the binary's flags, starts it, waits until its control socket
// answers a JSON health request, and returns {stop}, which resolves once the
// process has exited and its tcp ports are free again.
//
// As the Node module does, each call merges its config over the previous
// ones' (settings persist across restarts within one process).
//
// The binary: $EXEC_SUPERVISOR_BIN, else exec-supervisor on $PATH. Its state
// directory (lock, token, mark): one per control address under the system's
// temp directory, kept across restarts ($EXEC_SUPERVISOR_SHIM_STATE_ROOT
// moves them). Its log: $EXEC_SUPERVISOR_SHIM_LOG (a file), else discarded.
//
// No dependency: the health check speaks ZMTP 3 (NULL, REQ) itself.

import { spawn } from "node:child_process";
import { mkdirSync, openSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";

const DEFAULTS = {
  controlAddress: "tcp://127.0.0.1:18790",
  eventAddress: "tcp://127.0.0.1:18791",
  maxConcurrentJobs: 50,
  ringBufferMaxBytes: 2 * 1024 * 1024,
  chunkMergeIntervalMs: 200,
  defaultTimeoutMs: 600000,
  cleanupIntervalMs: 60000,
  finishedJobRetentionMs: 300000,
  eventHwm: 1000,
  journalPath: "/tmp/exec-supervisor-journal.json",
  journalFlushIntervalMs: 5000,
};

let current = { ...DEFAULTS };

const START_TIMEOUT_MS = 15000;
const STOP_TIMEOUT_MS = 20000;

/** The binary's flags for an OpenClaw config. */
export function supervisorArgs(config, stateDir) {
  const ms = (v) => `${Math.trunc(v)}ms`;
  return [
    `--control=${config.controlAddress}`,
    `--event=${config.eventAddress}`,
    `--max-jobs=${config.maxConcurrentJobs}`,
    `--ring-buffer=${config.ringBufferMaxBytes}`,
    `--chunk-merge-interval=${ms(config.chunkMergeIntervalMs)}`,
    `--default-timeout=${ms(config.defaultTimeoutMs)}`,
    `--cleanup-interval=${ms(config.cleanupIntervalMs)}`,
    `--finished-job-retention=${ms(config.finishedJobRetentionMs)}`,
    `--event-hwm=${config.eventHwm}`,
    `--journal=${config.journalPath}`,
    `--journal-flush-interval=${ms(config.journalFlushIntervalMs)}`,
    `--state-dir=${stateDir}`,
    "--metrics-addr=", // (no third port to clash between suites)
  ];
}

/** Starts a supervisor; resolves to {stop} once it answers health. */
export async function startSupervisor(userConfig = {}) {
  current = { ...current, ...userConfig };
  const config = { ...current };
  const root = process.env.EXEC_SUPERVISOR_SHIM_STATE_ROOT || path.join(os.tmpdir(), `exec-supervisor-shim-${process.getuid?.() ?? 0}`);
  mkdirSync(root, { recursive: true, mode: 0o700 });
  const stateDir = path.join(root, config.controlAddress.replace(/[^A-Za-z0-9._-]/g, "_"));
  const bin = process.env.EXEC_SUPERVISOR_BIN || "exec-supervisor";
  const logFile = process.env.EXEC_SUPERVISOR_SHIM_LOG;
  const out = logFile ? openSync(logFile, "a") : "ignore";
  const child = spawn(bin, supervisorArgs(config, stateDir), { stdio: ["ignore", out, logFile ? out : "pipe"] });
  let stderr = "";
  child.stderr?.on("data", (d) => {
    stderr = (stderr + d).slice(-4000);
  });
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const spawnError = new Promise((_, reject) => child.once("error", reject));

  const deadline = Date.now() + START_TIMEOUT_MS;
  let ready = false;
  let lastErr;
  while (!ready) {
    const st = await Promise.race([exited.then((e) => ({ exited: e })), spawnError, sleep(0).then(() => null)]);
    if (st?.exited) {
      throw new Error(`exec-supervisor exited during start (${JSON.stringify(st.exited)}): ${stderr.trim()}`);
    }
    try {
      const rep = await zmtpRequest(config.controlAddress, { type: "health" }, 1000);
      ready = rep.type === "health" && rep.success === true;
      if (!ready) lastErr = new Error(JSON.stringify(rep));
    } catch (err) {
      lastErr = err;
    }
    if (!ready) {
      if (Date.now() > deadline) {
        child.kill("SIGKILL");
        throw new Error(`exec-supervisor did not answer health within ${START_TIMEOUT_MS} ms (${lastErr}): ${stderr.trim()}`);
      }
      await sleep(20);
    }
  }

  let stopping;
  const stop = () => {
    stopping ??= (async () => {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT_MS);
      await exited;
      clearTimeout(timer);
      await Promise.all([config.controlAddress, config.eventAddress].map(portFree));
    })();
    return stopping;
  };
  return { stop };
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** The socket address of a tcp:// or ipc:// endpoint. */
function connectOptions(endpoint) {
  const m = /^(tcp|ipc):\/\/(.+)$/.exec(endpoint);
  if (!m) throw new Error(`endpoint ${endpoint}: want tcp://HOST:PORT or ipc:///path`);
  if (m[1] === "ipc") return { path: m[2] };
  const i = m[2].lastIndexOf(":");
  return { host: m[2].slice(0, i).replace(/^\[|\]$/g, ""), port: Number(m[2].slice(i + 1)) };
}

/** Resolves once a tcp endpoint's port can be bound again (at once for ipc). */
async function portFree(endpoint) {
  const o = connectOptions(endpoint);
  if (o.path) return;
  const deadline = Date.now() + STOP_TIMEOUT_MS;
  for (;;) {
    const free = await new Promise((resolve) => {
      const srv = net.createServer();
      srv.once("error", () => resolve(false));
      srv.listen({ host: o.host, port: o.port, exclusive: true }, () => srv.close(() => resolve(true)));
    });
    if (free || Date.now() > deadline) return;
    await sleep(10);
  }
}

/**
 * One JSON request over a fresh ZMTP 3 REQ connection, mechanism NULL (a
 * supervisor admits a loopback client of its own uid without a token, and
 * ipc clients of its uid): the reply's JSON.
 */
export function zmtpRequest(endpoint, request, timeoutMs) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(connectOptions(endpoint));
    let buf = Buffer.alloc(0);
    let stage = "greeting";
    const frames = [];
    const timer = setTimeout(() => done(new Error("timeout")), timeoutMs);
    const done = (err, value) => {
      clearTimeout(timer);
      sock.destroy();
      if (err) reject(err);
      else resolve(value);
    };
    sock.on("error", (err) => done(err));
    sock.on("close", () => done(new Error("connection closed")));
    sock.on("connect", () => {
      const g = Buffer.alloc(64);
      g[0] = 0xff;
      g[9] = 0x7f;
      g[10] = 3;
      g.write("NULL", 12, "latin1");
      sock.write(g);
    });
    // A frame: flags, 1- or 8-byte size, body (null until it is whole).
    const takeFrame = () => {
      if (buf.length < 2) return null;
      const long = buf[0] & 0x02;
      const hdr = long ? 9 : 2;
      if (buf.length < hdr) return null;
      const size = long ? Number(buf.readBigUInt64BE(1)) : buf[1];
      if (buf.length < hdr + size) return null;
      const f = { flags: buf[0], body: buf.subarray(hdr, hdr + size) };
      buf = buf.subarray(hdr + size);
      return f;
    };
    const frame = (flags, body) => {
      if (body.length < 256) return Buffer.concat([Buffer.from([flags, body.length]), body]);
      const h = Buffer.alloc(9);
      h[0] = flags | 0x02;
      h.writeBigUInt64BE(BigInt(body.length), 1);
      return Buffer.concat([h, body]);
    };
    sock.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        if (stage === "greeting") {
          if (buf.length < 64) return;
          const mech = buf.subarray(12, 32).toString("latin1").replace(/\0+$/, "");
          buf = buf.subarray(64);
          if (mech !== "NULL") return done(new Error(`the supervisor wants mechanism ${mech} (a token)`));
          const name = Buffer.from("Socket-Type");
          const val = Buffer.from("REQ");
          const len = Buffer.alloc(4);
          len.writeUInt32BE(val.length);
          const ready = Buffer.concat([Buffer.from([5]), Buffer.from("READY"), Buffer.from([name.length]), name, len, val]);
          sock.write(frame(0x04, ready));
          stage = "ready";
          continue;
        }
        const f = takeFrame();
        if (!f) return;
        if (stage === "ready") {
          const cmd = f.body.subarray(1, 1 + f.body[0]).toString("latin1");
          if (cmd === "ERROR") return done(new Error(`refused: ${f.body.subarray(7).toString()}`));
          if (cmd !== "READY") return done(new Error(`expected READY, got ${cmd}`));
          sock.write(Buffer.concat([frame(0x01, Buffer.alloc(0)), frame(0x00, Buffer.from(JSON.stringify(request)))]));
          stage = "reply";
          continue;
        }
        if (f.flags & 0x04) continue; // (a command between messages)
        frames.push(f.body);
        if (!(f.flags & 0x01)) {
          try {
            return done(null, JSON.parse(frames[frames.length - 1].toString("utf8")));
          } catch (err) {
            return done(err);
          }
        }
      }
    });
  });
}
