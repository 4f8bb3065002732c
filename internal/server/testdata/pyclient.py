#!/usr/bin/env python3
"""Interop client for exec-supervisor written from the wire format alone.

Usage: pyclient.py CONTROL_ENDPOINT EVENT_ENDPOINT

Talks to the supervisor through libzmq (pyzmq) and msgpack, without any
code from this repository:

  control: REQ or DEALER socket, request body = msgpack map
           {v: 2, id, op, args}; reply = {v, id, ok, result | error{code, message}}
  events:  SUB socket, 2 frames [topic, msgpack event]; topics are
           "job/<jobId>/" and "sup/heartbeat".

Prints "PYCLIENT OK" and exits 0 when every check passes; otherwise prints
what went wrong to stderr and exits 1.
"""

import os
import sys
import time

import msgpack
import zmq

PROTOCOL = 2
TIMEOUT_MS = 5000
TERMINAL = ("job.exited", "job.failed")


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


def unpack(b, what):
    try:
        return msgpack.unpackb(b, raw=False)
    except Exception as e:  # noqa: BLE001 - report any decode error clearly
        raise Failure("cannot decode %s (%d bytes, %r...): %s" % (what, len(b), b[:32], e))


def request(op, rid, args=None):
    req = {"v": PROTOCOL, "id": rid, "op": op}
    if args is not None:
        req["args"] = args
    return pack(req)


def log(msg):
    print("pyclient: " + msg, flush=True)


# PLAIN password for tcp endpoints (ZMTP PLAIN; the user name is ignored by
# the supervisor), from the optional third argument.
TOKEN = None


# CURVE for tcp endpoints (ZMTP RFC 26), from the environment, instead of
# PLAIN: the supervisor's public key (its curve.pub) and this client's key
# pair, Z85 as zmq.curve_keypair() gives them.
CURVE_SERVER = os.environ.get("PYCLIENT_CURVE_SERVER_KEY")
CURVE_PUBLIC = os.environ.get("PYCLIENT_CURVE_PUBLIC_KEY")
CURVE_SECRET = os.environ.get("PYCLIENT_CURVE_SECRET_KEY")


def new_socket(ctx, typ, endpoint):
    s = ctx.socket(typ)
    if CURVE_SERVER:
        s.setsockopt(zmq.CURVE_SERVERKEY, CURVE_SERVER.encode())
        s.setsockopt(zmq.CURVE_PUBLICKEY, CURVE_PUBLIC.encode())
        s.setsockopt(zmq.CURVE_SECRETKEY, CURVE_SECRET.encode())
    elif TOKEN is not None:
        s.setsockopt(zmq.PLAIN_USERNAME, b"exec-supervisor")
        s.setsockopt(zmq.PLAIN_PASSWORD, TOKEN.encode())
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
    s.setsockopt(zmq.SNDTIMEO, TIMEOUT_MS)
    s.connect(endpoint)
    return s


def recv_frames(sock, what):
    try:
        return sock.recv_multipart()
    except zmq.Again:
        raise Failure("timed out after %d ms waiting for %s" % (TIMEOUT_MS, what))


def req_call(sock, body, what):
    """One REQ round trip; returns the decoded reply map."""
    try:
        sock.send(body)
    except zmq.Again:
        raise Failure("timed out sending %s" % what)
    frames = recv_frames(sock, "reply to " + what)
    check(len(frames) == 1, "REQ reply to %s: want 1 frame after libzmq strips the envelope, got %d: %r"
          % (what, len(frames), frames))
    rep = unpack(frames[0], "reply to " + what)
    check(isinstance(rep, dict), "reply to %s is not a map: %r" % (what, rep))
    check(rep.get("v") == PROTOCOL, "reply to %s: v=%r, want %d" % (what, rep.get("v"), PROTOCOL))
    return rep


def ok_result(rep, what, rid):
    check(rep.get("id") == rid, "reply to %s: id %r, want %r" % (what, rep.get("id"), rid))
    check(rep.get("ok") is True, "%s failed: %r" % (what, rep.get("error")))
    check("error" not in rep, "%s: ok reply also carries an error: %r" % (what, rep))
    res = rep.get("result")
    check(isinstance(res, dict), "%s: result is not a map: %r" % (what, res))
    return res


def err_reply(rep, what, code, rid):
    check(rep.get("ok") is False, "%s: want ok false, got %r" % (what, rep))
    err = rep.get("error")
    check(isinstance(err, dict), "%s: error is not a map: %r" % (what, rep))
    check(err.get("code") == code, "%s: error code %r, want %r (message %r)"
          % (what, err.get("code"), code, err.get("message")))
    check(isinstance(err.get("message"), str) and err["message"], "%s: empty error message: %r" % (what, err))
    check(rep.get("id") == rid, "%s: reply id %r, want %r" % (what, rep.get("id"), rid))
    check("result" not in rep, "%s: error reply also carries a result: %r" % (what, rep))


def decode_event(frames, what):
    check(len(frames) == 2, "%s: want 2 frames [topic, body], got %d: %r" % (what, len(frames), frames))
    topic = frames[0].decode("utf-8", "replace")
    ev = unpack(frames[1], what)
    check(isinstance(ev, dict), "%s: event is not a map: %r" % (what, ev))
    check(ev.get("v") == PROTOCOL, "%s: event v=%r" % (what, ev.get("v")))
    check(isinstance(ev.get("kind"), str), "%s: event has no kind: %r" % (what, ev))
    check(isinstance(ev.get("payload"), dict), "%s: payload is not a map: %r" % (what, ev))
    return topic, ev


def check_job_events(events, job_id, what):
    """Checks seqs 1..n contiguous, output, and the exit payload."""
    check(events, "%s: no events" % what)
    seqs = [e.get("seq") for e in events]
    check(seqs == list(range(1, len(events) + 1)), "%s: seqs not contiguous from 1: %r" % (what, seqs))
    out, err = b"", b""
    for e in events:
        check(e.get("jobId") == job_id, "%s: event of job %r, want %r" % (what, e.get("jobId"), job_id))
        p = e["payload"]
        if e["kind"] in ("job.stdout", "job.stderr"):
            check(isinstance(p.get("data"), bytes), "%s: %s data is %s, want msgpack bin (bytes)"
                  % (what, e["kind"], type(p.get("data")).__name__))
            if e["kind"] == "job.stdout":
                out += p["data"]
            else:
                err += p["data"]
    kinds = [e["kind"] for e in events]
    check(kinds[0] == "job.started", "%s: first event %r, want job.started" % (what, kinds[0]))
    check(kinds[-1] in TERMINAL, "%s: last event %r is not terminal" % (what, kinds[-1]))
    check(sum(k in TERMINAL for k in kinds) == 1, "%s: terminal events %r" % (what, kinds))
    check(out == b"py-hello\n", "%s: stdout %r, want b'py-hello\\n'" % (what, out))
    check(err == b"py-err\n", "%s: stderr %r, want b'py-err\\n'" % (what, err))
    exitp = events[-1]["payload"]
    check(kinds[-1] == "job.exited", "%s: job ended with %s: %r" % (what, kinds[-1], exitp))
    check(exitp.get("reason") == "exit", "%s: exit reason %r, want 'exit'" % (what, exitp.get("reason")))
    check(exitp.get("exitCode") == 4, "%s: exitCode %r, want 4" % (what, exitp.get("exitCode")))
    return kinds


def main(control, event):
    ctx = zmq.Context.instance()
    socks = []

    def sock(typ, endpoint):
        s = new_socket(ctx, typ, endpoint)
        socks.append(s)
        return s

    try:
        # Event sockets first so their subscriptions reach the PUB early.
        # hb: heartbeats only. live: every job event plus heartbeats; the
        # "job/" subscription is set before "sup/heartbeat", so once a
        # heartbeat arrives on it both subscriptions are in effect.
        hb = sock(zmq.SUB, event)
        hb.setsockopt(zmq.SUBSCRIBE, b"sup/heartbeat")
        live = sock(zmq.SUB, event)
        live.setsockopt(zmq.SUBSCRIBE, b"job/")
        live.setsockopt(zmq.SUBSCRIBE, b"sup/heartbeat")

        req = sock(zmq.REQ, control)

        # health
        health = ok_result(req_call(req, request("health", "h1"), "health"), "health", "h1")
        check(health.get("protocol") == PROTOCOL, "health protocol %r" % health.get("protocol"))
        instance = health.get("instanceId")
        check(isinstance(instance, str) and instance, "health instanceId %r" % instance)
        log("health ok: instance %s version %s" % (instance, health.get("version")))

        # heartbeat on sup/heartbeat within 5 s
        deadline = time.monotonic() + 5
        while True:
            check(time.monotonic() < deadline, "no supervisor.heartbeat within 5 s")
            topic, ev = decode_event(recv_frames(hb, "a heartbeat on sup/heartbeat"), "heartbeat")
            check(topic == "sup/heartbeat", "SUB subscribed to sup/heartbeat got topic %r" % topic)
            check(ev["kind"] == "supervisor.heartbeat", "heartbeat topic carries kind %r" % ev["kind"])
            check(ev.get("seq") == 0, "heartbeat seq %r, want 0" % ev.get("seq"))
            check(ev["payload"].get("instanceId") == instance, "heartbeat instanceId %r, health said %r"
                  % (ev["payload"].get("instanceId"), instance))
            break
        log("heartbeat ok")

        # Sync the live SUB: a heartbeat on it proves "job/" is subscribed too.
        while True:
            check(time.monotonic() < deadline + 5, "live SUB never saw a heartbeat")
            topic, ev = decode_event(recv_frames(live, "a heartbeat on the live SUB"), "live sync")
            if topic == "sup/heartbeat":
                break

        # spawn
        argv = ["sh", "-c", "echo py-hello; echo py-err >&2; exit 4"]
        res = ok_result(req_call(req, request("spawn", "s1", {"argv": argv}), "spawn"), "spawn", "s1")
        job_id = res.get("jobId")
        check(isinstance(job_id, str) and job_id, "spawn jobId %r" % job_id)
        check(isinstance(res.get("job"), dict) and res["job"].get("jobId") == job_id, "spawn job %r" % res.get("job"))
        log("spawned %s" % job_id)

        # A SUB on exactly "job/<id>/" (set after spawn: may miss early events).
        jobsub = sock(zmq.SUB, event)
        jobsub.setsockopt(zmq.SUBSCRIBE, ("job/%s/" % job_id).encode())

        # subscribe op until a terminal event (10 s deadline)
        deadline = time.monotonic() + 10
        n = 0
        while True:
            n += 1
            rid = "sub-%d" % n
            res = ok_result(req_call(req, request("subscribe", rid, {"jobId": job_id, "fromSeq": 1}), "subscribe"),
                            "subscribe", rid)
            events = res.get("events") or []
            check(not res.get("missing"), "subscribe reports missing events: %r" % res.get("missing"))
            if any(e.get("kind") in TERMINAL for e in events):
                break
            check(time.monotonic() < deadline, "job %s not finished after 10 s; events so far: %r"
                  % (job_id, [e.get("kind") for e in events]))
            time.sleep(0.05)
        for i, e in enumerate(events):
            check(isinstance(e, dict) and isinstance(e.get("payload"), dict),
                  "subscribe event %d is malformed: %r" % (i, e))
        kinds = check_job_events(events, job_id, "subscribe")
        log("subscribe ok after %d calls: %s" % (n, " ".join(kinds)))

        # The live SUB (subscribed before spawn, synced) sees the same stream.
        topic_want = "job/%s/" % job_id
        live_events = []
        while not live_events or live_events[-1]["kind"] not in TERMINAL:
            topic, ev = decode_event(recv_frames(live, "live events of " + job_id), "live event")
            if topic == "sup/heartbeat":
                continue
            check(topic.startswith("job/"), "live SUB got topic %r" % topic)
            if topic != topic_want:
                continue  # another job (none expected, but not ours)
            check(ev.get("jobId") == job_id, "topic %r carries event of job %r" % (topic, ev.get("jobId")))
            live_events.append(ev)
        check_job_events(live_events, job_id, "live PUB/SUB")
        check([(e["seq"], e["kind"], e["payload"]) for e in live_events]
              == [(e["seq"], e["kind"], e["payload"]) for e in events],
              "live events differ from subscribe events")
        log("live PUB/SUB ok: %d events on topic %s" % (len(live_events), topic_want))

        # Best effort: whatever reached the job-topic SUB is well-formed.
        jobsub.setsockopt(zmq.RCVTIMEO, 300)
        got = 0
        while True:
            try:
                frames = jobsub.recv_multipart()
            except zmq.Again:
                break
            topic, ev = decode_event(frames, "job-topic event")
            check(topic == topic_want, "SUB on %r got topic %r" % (topic_want, topic))
            check(ev.get("jobId") == job_id, "job-topic event of job %r" % ev.get("jobId"))
            got += 1
        log("job-topic SUB (subscribed after spawn) received %d events" % got)

        # malformed body
        rep = req_call(req, b"\xc1garbage", "malformed body")
        err_reply(rep, "malformed body", "bad-request", "")
        log("malformed body -> bad-request: %s" % rep["error"]["message"])

        # unknown op
        rep = req_call(req, pack({"v": PROTOCOL, "id": "u", "op": "nope"}), "unknown op")
        err_reply(rep, "unknown op", "unknown-op", "u")
        log("unknown op -> unknown-op")

        # the REQ socket still works
        again = ok_result(req_call(req, request("health", "h2"), "health after errors"), "health after errors", "h2")
        check(again.get("instanceId") == instance, "instance changed: %r" % again.get("instanceId"))
        log("REQ socket still usable")

        # DEALER speaking the REQ envelope, two requests in flight
        dealer = sock(zmq.DEALER, control)
        dealer.send_multipart([b"", request("health", "d-1")])
        dealer.send_multipart([b"", request("status", "d-2", {"jobId": job_id})])
        replies = {}
        for _ in range(2):
            frames = recv_frames(dealer, "DEALER replies")
            check(len(frames) == 2 and frames[0] == b"",
                  "DEALER reply: want [b'', body], got %d frames: %r" % (len(frames), [f[:40] for f in frames]))
            rep = unpack(frames[1], "DEALER reply")
            check(rep.get("v") == PROTOCOL, "DEALER reply v %r" % rep.get("v"))
            check(rep.get("id") not in replies, "duplicate DEALER reply id %r" % rep.get("id"))
            replies[rep.get("id")] = rep
        check(set(replies) == {"d-1", "d-2"}, "DEALER reply ids %r" % sorted(map(str, replies)))
        h = ok_result(replies["d-1"], "DEALER health", "d-1")
        check(h.get("instanceId") == instance, "DEALER health instance %r" % h.get("instanceId"))
        st = ok_result(replies["d-2"], "DEALER status", "d-2")
        job = st.get("job") or {}
        check(job.get("jobId") == job_id and job.get("state") == "exited" and job.get("exitCode") == 4
              and job.get("reason") == "exit", "DEALER status: %r" % job)
        log("DEALER ok: replies matched by id")

        # spawn and wait in one round trip (REQ): the reply is the job's end
        res = ok_result(req_call(req, request("spawn", "sw", {"shell": "echo waited; exit 5", "waitMs": 20000}),
                                 "spawn with waitMs"), "spawn with waitMs", "sw")
        job = res.get("job") or {}
        check(res.get("finished") is True and job.get("state") == "exited" and job.get("exitCode") == 5,
              "spawn with waitMs: %r" % res)
        # the wait op on a running job runs out: finished false
        res = ok_result(req_call(req, request("spawn", "sl", {"argv": ["sleep", "30"]}), "spawn sleep"), "spawn sleep", "sl")
        sleeper = res["jobId"]
        res = ok_result(req_call(req, request("wait", "w1", {"jobId": sleeper, "waitMs": 50}), "wait runs out"),
                        "wait runs out", "w1")
        check(res.get("finished") in (False, None) and (res.get("job") or {}).get("state") == "running",
              "wait on a running job: %r" % res)
        ok_result(req_call(req, request("kill", "k1", {"jobId": sleeper}), "kill sleeper"), "kill sleeper", "k1")
        res = ok_result(req_call(req, request("wait", "w2", {"jobId": sleeper, "waitMs": 20000}), "wait for kill"),
                        "wait for kill", "w2")
        check(res.get("finished") is True and (res.get("job") or {}).get("reason") == "manual-cancel",
              "wait after kill: %r" % res)
        log("spawn waitMs and wait ok")

        # A paced job, followed through subscribe alone, as protocol.md says:
        # the job prints more than the ring buffer holds, and waits for us.
        res = ok_result(req_call(req, request("spawn", "p1", {"argv": ["seq", "1", "500000"], "pace": True}),
                                 "paced spawn"), "paced spawn", "p1")
        paced = res["jobId"]
        want = b"".join(b"%d\n" % i for i in range(1, 500001))
        out, nxt, acked, window, n, done = [], 1, 0, 0, 0, False
        deadline = time.monotonic() + 20
        while not done:
            check(time.monotonic() < deadline, "paced job not followed to its end in 20 s (%d bytes)" % acked)
            n += 1
            rid = "ps-%d" % n
            r = ok_result(req_call(req, request("subscribe", rid, {"jobId": paced, "fromSeq": nxt}), "paced subscribe"),
                          "paced subscribe", rid)
            check(not r.get("missing"), "a paced job lost output: missing %r" % r.get("missing"))
            for e in r.get("events") or []:
                if e["kind"] == "job.stdout":
                    out.append(e["payload"]["data"])
                done = done or e["kind"] in TERMINAL
                nxt = e["seq"] + 1
            if not r.get("more"):  # caught up: everything published is taken
                n += 1
                rid = "pp-%d" % n
                p = ok_result(req_call(req, request("pace", rid, {"jobId": paced, "offset": r["job"]["outputEnd"]}),
                                       "pace"), "pace", rid)
                check(isinstance(p.get("windowBytes"), int) and p["windowBytes"] > 0, "pace result %r" % p)
                acked, window = r["job"]["outputEnd"], p["windowBytes"]
        got = b"".join(out)
        check(got == want, "paced output: %d bytes, want %d" % (len(got), len(want)))
        log("paced follow ok: %d bytes in %d requests, window %d" % (len(got), n, window))
    finally:
        for s in socks:
            s.close(linger=0)
        ctx.term()

    print("PYCLIENT OK", flush=True)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4, 5):
        print("usage: pyclient.py CONTROL_ENDPOINT EVENT_ENDPOINT [TOKEN [--expect-refused]]", file=sys.stderr)
        sys.exit(2)
    if len(sys.argv) >= 4 and sys.argv[3] != "":
        TOKEN = sys.argv[3]
    if len(sys.argv) == 5:
        # Authentication must fail: a health request gets no reply.
        c = zmq.Context()
        s = new_socket(c, zmq.REQ, sys.argv[1])
        s.setsockopt(zmq.RCVTIMEO, 1500)
        try:
            # (refused already: no peer to send to, the send times out)
            s.send(pack({"v": 2, "id": "x", "op": "health"}))
            s.recv()
            print("PYCLIENT FAIL: an unauthenticated client got a reply", file=sys.stderr)
            sys.exit(1)
        except zmq.Again:
            print("PYCLIENT REFUSED", flush=True)
            sys.exit(0)
        finally:
            s.close(linger=0)
            c.term()
    try:
        main(sys.argv[1], sys.argv[2])
    except Failure as e:
        print("PYCLIENT FAIL: %s" % e, file=sys.stderr, flush=True)
        sys.exit(1)
    except Exception as e:  # noqa: BLE001 - any surprise is a failure with a message
        import traceback
        traceback.print_exc()
        print("PYCLIENT FAIL: unexpected %s: %s" % (type(e).__name__, e), file=sys.stderr, flush=True)
        sys.exit(1)
