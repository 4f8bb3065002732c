// A client of exec-supervisor's OpenClaw JSON dialect written from
// docs/openclaw.md alone, on zeromq.js, shaped as OpenClaw's gateway client
// is: a REQ socket sending one frame of JSON per request (no credentials),
// a SUB socket subscribed to exec:<jobId> per job before it is spawned,
// events routed by the jobId in their payload. It checks every op, the
// events of a job (seq 0 is job.started), poll cursors, subscribe's
// backfill against what PUB/SUB delivered, kill, a timeout, and the
// replies to malformed requests (the REQ socket must never wedge).
//
// Usage: node openclawclient.mjs CONTROL_ENDPOINT EVENT_ENDPOINT
// Prints "OPENCLAWCLIENT OK" and exits 0 when every check passes.
import { Request, Subscriber } from "zeromq";

const [control, event] = process.argv.slice(2);

function fail(msg) {
  console.error("OPENCLAWCLIENT FAIL: " + msg);
  process.exit(1);
}
function check(cond, msg) {
  if (!cond) fail(msg);
}
const timer = setTimeout(() => fail("not done within 60 s"), 60000);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// receiveTimeout: a reply that never comes fails the check instead of
// hanging (OpenClaw's client races its own timer the same way).
const req = new Request({ receiveTimeout: 15000, linger: 0 });
req.connect(control);
async function call(msg) {
  await req.send(JSON.stringify(msg));
  const [rep] = await req.receive();
  return JSON.parse(rep.toString("utf8"));
}
async function raw(text) {
  await req.send(text);
  const [rep] = await req.receive();
  return JSON.parse(rep.toString("utf8"));
}

// Events by job id, as the payload says (exec:j1 also matches exec:j10).
const sub = new Subscriber({ linger: 0 });
sub.connect(event);
const events = new Map();
const waiters = [];
(async () => {
  for await (const [topic, body] of sub) {
    check(topic.toString().startsWith("exec:"), "topic " + topic);
    check(body !== undefined, "event without a body frame on " + topic);
    const ev = JSON.parse(body.toString("utf8"));
    check(topic.toString() === "exec:" + ev.jobId, "topic " + topic + " for job " + ev.jobId);
    if (!events.has(ev.jobId)) events.set(ev.jobId, []);
    events.get(ev.jobId).push(ev);
    for (const w of waiters.splice(0)) w();
  }
})().catch((e) => fail("SUB receive: " + e));
// waitFor: whether cond came true within ms (woken by each event).
async function waitFor(cond, ms) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() >= deadline) return false;
    await Promise.race([new Promise((r) => waiters.push(r)), sleep(50)]);
  }
  return true;
}
async function until(what, cond, ms = 10000) {
  check(await waitFor(cond, ms), "timed out waiting for " + what);
}
async function pollUntilEnded(jobId, ms = 10000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const rep = await call({ type: "poll", jobId });
    check(rep.success === true, "poll " + JSON.stringify(rep));
    if (rep.state === "exited" || rep.state === "failed") return rep;
    check(Date.now() < deadline, jobId + " still " + rep.state);
    await sleep(20);
  }
}

const run = Date.now().toString(36);
const isInt = (v) => Number.isInteger(v) && v >= 0;

// health
let rep = await call({ type: "health" });
check(rep.type === "health" && rep.success === true, "health " + JSON.stringify(rep));
for (const k of ["uptime", "activeJobs", "totalJobsProcessed", "memoryUsageMB", "eventsDropped"]) {
  check(isInt(rep[k]), "health." + k + " = " + rep[k]);
}

// Subscribe to the jobs before they exist, then to a warm-up topic: once
// a warm-up job's event arrives, the publisher has the earlier
// subscriptions too (they travel in order on one connection).
const jobId = "oc-" + run;
const sleeper = "sleeper-" + run;
const slow = "slow-" + run;
for (const id of [jobId, sleeper, slow]) sub.subscribe("exec:" + id);
sub.subscribe("exec:warm-" + run); // (prefix: exec:warm-<run>-0, -1, ...)
const warm = "warm-" + run;
for (let i = 0; ; i++) {
  check(i < 100, "no event on exec:" + warm + " after 100 jobs");
  rep = await call({ type: "spawn", jobId: warm + "-" + i, command: "true" });
  check(rep.success === true, "warm-up spawn " + JSON.stringify(rep));
  if (await waitFor(() => [...events.keys()].some((k) => k.startsWith(warm)), 300)) break;
}

// spawn, events, poll, subscribe
rep = await call({ type: "spawn", jobId, command: "printf 'one\\n'; printf 'two\\n' >&2; printf \"$OC_VAR\"", env: { OC_VAR: "x" } });
check(rep.type === "spawn" && rep.success === true && rep.jobId === jobId && isInt(rep.pid) && rep.pid > 0, "spawn " + JSON.stringify(rep));
const pid = rep.pid;
rep = await call({ type: "spawn", jobId, command: "true" });
check(rep.success === false && /already exists/.test(rep.error), "second spawn " + JSON.stringify(rep));
await until(jobId + "'s terminal event", () => (events.get(jobId) ?? []).some((e) => e.kind === "job.exited"));
const evs = events.get(jobId);
check(evs[0].kind === "job.started" && evs[0].seq === 0 && evs[0].pid === pid, "first event " + JSON.stringify(evs[0]));
for (let i = 1; i < evs.length; i++) check(evs[i].seq > evs[i - 1].seq, "seqs " + evs.map((e) => e.seq));
const exited = evs[evs.length - 1];
check(exited.kind === "job.exited" && exited.exitCode === 0 && exited.exitSignal === null && exited.reason === "exit", "exit " + JSON.stringify(exited));
const text = (list, kind) => list.filter((e) => e.kind === kind).map((e) => e.data).join("");
check(text(evs, "job.stdout") === "one\nx" && text(evs, "job.stderr") === "two\n", "output events " + JSON.stringify(evs));
rep = await call({ type: "poll", jobId, cursor: 0 });
check(rep.state === "exited" && rep.exitCode === 0 && rep.exitSignal === null && rep.terminationReason === "exit", "poll " + JSON.stringify(rep));
check(rep.cursor === exited.seq + 1, "cursor " + rep.cursor + " after seq " + exited.seq);
const chunkText = (kind) => rep.chunks.filter((c) => c.kind === kind).map((c) => c.data).join("");
check(chunkText("stdout") === "one\nx" && chunkText("stderr") === "two\n", "chunks " + JSON.stringify(rep.chunks));
for (const c of rep.chunks) {
  const same = evs.find((e) => e.seq === c.seq);
  check(same && same.kind === "job." + c.kind && same.data === c.data, "chunk " + JSON.stringify(c) + " unlike its event");
}
rep = await call({ type: "poll", jobId, cursor: rep.cursor });
check(rep.chunks.length === 0, "poll from the cursor " + JSON.stringify(rep));
rep = await call({ type: "subscribe", jobId, fromSeq: 0 });
check(rep.success === true && rep.currentSeq === exited.seq && JSON.stringify(rep.events.map((e) => ({ ...e, ts: 0 }))) === JSON.stringify(evs.map((e) => ({ ...e, ts: 0 }))),
  "subscribe backfill " + JSON.stringify(rep) + " unlike the events " + JSON.stringify(evs));

// kill (default signal: TERM, to the group), list-jobs, status
check((await call({ type: "spawn", jobId: sleeper, command: "sleep 30", timeoutMs: 0 })).success === true, "spawn sleeper");
rep = await call({ type: "list-jobs" });
check(rep.success === true && rep.jobs.some((j) => j.jobId === sleeper && ["pending", "running"].includes(j.state) && isInt(j.startedAtMs)), "list-jobs " + JSON.stringify(rep));
check(!rep.jobs.some((j) => j.jobId === jobId), "list-jobs lists an ended job " + JSON.stringify(rep));
rep = await call({ type: "kill", jobId: sleeper });
check(rep.type === "kill" && rep.success === true, "kill " + JSON.stringify(rep));
rep = await pollUntilEnded(sleeper);
check(rep.state === "exited" && rep.exitCode === null && rep.exitSignal === "SIGTERM" && rep.terminationReason === "signal", "killed " + JSON.stringify(rep));
check((await call({ type: "kill", jobId: sleeper })).success === true, "kill of an ended job");
rep = await call({ type: "status", jobId: sleeper });
check(rep.success === true && rep.job.jobId === sleeper && rep.job.state === "exited", "status " + JSON.stringify(rep));
rep = await call({ type: "status" });
const ids = rep.jobs.map((j) => j.jobId);
check(rep.success === true && ids.indexOf(jobId) >= 0 && ids.indexOf(jobId) < ids.indexOf(sleeper), "status of all, in spawn order " + ids);

// a timeout: failed, reason timeout, job.failed
check((await call({ type: "spawn", jobId: slow, command: "sleep 10", timeoutMs: 200 })).success === true, "spawn slow");
rep = await pollUntilEnded(slow);
check(rep.state === "failed" && rep.terminationReason === "timeout", "timed out " + JSON.stringify(rep));
await until(slow + "'s job.failed", () => (events.get(slow) ?? []).some((e) => e.kind === "job.failed"));
const failed = events.get(slow).find((e) => e.kind === "job.failed");
check(failed.error === "timeout" && failed.reason === "timeout", "job.failed " + JSON.stringify(failed));

// errors: each gets one reply, and the socket goes on
rep = await call({ type: "poll", jobId: "nope-" + run });
check(rep.success === false && rep.state === "failed" && rep.chunks.length === 0 && rep.cursor === 0 && rep.error === "Job not found", "poll of an unknown job " + JSON.stringify(rep));
rep = await call({ type: "status", jobId: "nope-" + run });
check(rep.success === false && rep.error === "Job not found", "status of an unknown job " + JSON.stringify(rep));
rep = await call({ type: "no-such-op" });
check(rep.type === "health" && rep.success === false, "unknown type " + JSON.stringify(rep));
rep = await raw("{not json");
check(rep.type === "health" && rep.success === false && typeof rep.error === "string", "malformed JSON " + JSON.stringify(rep));
rep = await call({ type: "health" });
check(rep.success === true, "health after the errors " + JSON.stringify(rep));

clearTimeout(timer);
req.close();
sub.close();
console.log("OPENCLAWCLIENT OK");
