// Interop client for exec-supervisor written from docs/protocol.md alone,
// on zeromq.js (libzmq) and @msgpack/msgpack: DEALER control (several
// requests in flight, matched by id), SUB events (heartbeat), spawn and
// wait in one round trip, poll, an error reply, and a paced job followed
// through subscribe without losing a byte.
//
// Usage: node nodeclient.mjs CONTROL_ENDPOINT EVENT_ENDPOINT [TOKEN]
// Prints "NODECLIENT OK" and exits 0 when every check passes.
import { Dealer, Subscriber } from "zeromq";
import { encode, decode } from "@msgpack/msgpack";

const [control, event, token] = process.argv.slice(2);

function fail(msg) {
  console.error("NODECLIENT FAIL: " + msg);
  process.exit(1);
}
function check(cond, msg) {
  if (!cond) fail(msg);
}
function log(msg) {
  console.log("nodeclient: " + msg);
}
const timer = setTimeout(() => fail("not done within 60 s"), 60000);

function socket(s) {
  if (token) {
    s.plainUsername = "exec-supervisor";
    s.plainPassword = token;
  }
  return s;
}

const dealer = socket(new Dealer());
dealer.connect(control);
const pending = new Map();
let nextId = 0;
(async () => {
  for await (const frames of dealer) {
    check(frames.length === 2 && frames[0].length === 0, "DEALER reply: want ['', body], got " + frames.length + " frames");
    const rep = decode(frames[1]);
    check(rep.v === 2, "reply v " + rep.v);
    const resolve = pending.get(rep.id);
    check(resolve !== undefined, "reply to an unknown id " + JSON.stringify(rep.id));
    pending.delete(rep.id);
    resolve(rep);
  }
})().catch((e) => fail("DEALER receive: " + e));

async function request(op, args) {
  const id = "n-" + ++nextId;
  const reply = new Promise((resolve) => pending.set(id, resolve));
  await dealer.send(["", encode({ v: 2, id, op, args: args ?? {} })]);
  const rep = await reply;
  check(rep.id === id, "reply id " + rep.id + ", want " + id);
  return rep;
}
async function call(op, args) {
  const rep = await request(op, args);
  check(rep.ok === true, op + " failed: " + JSON.stringify(rep.error));
  return rep.result;
}

// health, and two requests in flight at once
const [health, list] = await Promise.all([call("health"), call("list-jobs", { limit: 5 })]);
check(health.protocol === 2 && typeof health.instanceId === "string" && health.instanceId !== "", "health " + JSON.stringify(health));
check(Array.isArray(list.jobs), "list-jobs " + JSON.stringify(list));
log("health ok: instance " + health.instanceId);

// a heartbeat on sup/heartbeat
const sub = socket(new Subscriber());
sub.connect(event);
sub.subscribe("sup/heartbeat");
{
  const [topic, body] = await sub.receive();
  const ev = decode(body);
  check(topic.toString() === "sup/heartbeat" && ev.kind === "supervisor.heartbeat" && ev.seq === 0, "heartbeat " + topic + " " + JSON.stringify(ev));
  check(ev.payload.instanceId === health.instanceId, "heartbeat instance " + ev.payload.instanceId);
  log("heartbeat ok");
}
sub.close();

// spawn and wait in one round trip, then poll its output
{
  const res = await call("spawn", { shell: "echo hi from node; exit 3", waitMs: 20000 });
  check(res.finished === true && res.job.state === "exited" && res.job.exitCode === 3 && res.job.reason === "exit", "spawn waitMs " + JSON.stringify(res));
  const out = await call("poll", { jobId: res.jobId, cursor: 0 });
  const text = Buffer.concat(out.chunks.map((c) => Buffer.from(c.data))).toString();
  check(text === "hi from node\n" && out.next === 13 && !out.more, "poll " + JSON.stringify(text) + " next " + out.next);
  log("spawn waitMs and poll ok");
}

// an error reply
{
  const rep = await request("no-such-op");
  check(rep.ok === false && rep.error.code === "unknown-op", "unknown op " + JSON.stringify(rep));
  log("unknown op -> unknown-op");
}

// a paced job, followed through subscribe alone: more output than the
// ring buffer holds, none of it lost
{
  const res = await call("spawn", { argv: ["seq", "1", "500000"], pace: true });
  const job = res.jobId;
  const parts = [];
  let next = 1;
  let done = false;
  let requests = 0;
  while (!done) {
    const r = await call("subscribe", { jobId: job, fromSeq: next });
    requests++;
    check(!r.missing, "a paced job lost output: missing " + JSON.stringify(r.missing));
    for (const e of r.events ?? []) {
      if (e.kind === "job.stdout") parts.push(Buffer.from(e.payload.data));
      if (e.kind === "job.exited" || e.kind === "job.failed") done = true;
      next = e.seq + 1;
    }
    if (!r.more) {
      // caught up: everything published is taken
      const p = await call("pace", { jobId: job, offset: r.job.outputEnd });
      check(typeof p.windowBytes === "number" && p.windowBytes > 0, "pace result " + JSON.stringify(p));
      requests++;
    }
  }
  let want = "";
  for (let i = 1; i <= 500000; i++) want += i + "\n";
  const got = Buffer.concat(parts).toString();
  check(got === want, "paced output: " + got.length + " bytes, want " + want.length);
  log("paced follow ok: " + got.length + " bytes in " + requests + " requests");
}

clearTimeout(timer);
dealer.close();
console.log("NODECLIENT OK");
process.exit(0);
