#!/usr/bin/env python3
"""A client of OpenClaw's JSON exec dialect on libzmq (pyzmq): a REQ socket
sending JSON text, a SUB socket receiving [exec:<jobId>, JSON event], as
OpenClaw's gateway client (zeromq.js) does. A Go test drives it over
stdin/stdout, one JSON command per line, one JSON answer per line:

  {"op": "req", "body": TEXT}        send TEXT (or "hex": raw bytes) as one frame;
                                     -> {"reply": TEXT} | {"replyHex": HEX} (not UTF-8)
                                        | {"timeout": true} (no reply in 10 s)
  {"op": "sub", "topic": T}          subscribe the SUB socket -> {"ok": true}
  {"op": "subreq", "topic": T, "body": TEXT}
                                     subscribe, then send TEXT at once (as a
                                     gateway subscribes to a job, then spawns
                                     it) -> as "req"
  {"op": "recv", "timeoutMs": N}     -> {"frames": [TEXT, ...]} | {"timeout": true}

usage: jsonbridge.py CONTROL EVENT
"""
import json
import sys

import zmq


def main():
    control, event = sys.argv[1], sys.argv[2]
    ctx = zmq.Context()
    req = ctx.socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(control)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(event)
    out = sys.stdout
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "subreq":
            sub.setsockopt(zmq.SUBSCRIBE, cmd["topic"].encode())
            op = "req"
        if op == "req":
            body = bytes.fromhex(cmd["hex"]) if "hex" in cmd else cmd["body"].encode()
            req.send(body)
            if req.poll(10000, zmq.POLLIN):
                frames = req.recv_multipart()
                if len(frames) != 1:
                    ans = {"error": "reply of %d frames" % len(frames)}
                else:
                    try:
                        ans = {"reply": frames[0].decode("utf-8")}
                    except UnicodeDecodeError:
                        ans = {"replyHex": frames[0].hex()}
            else:
                ans = {"timeout": True}
        elif op == "sub":
            sub.setsockopt(zmq.SUBSCRIBE, cmd["topic"].encode())
            ans = {"ok": True}
        elif op == "recv":
            if sub.poll(cmd.get("timeoutMs", 5000), zmq.POLLIN):
                ans = {"frames": [f.decode("utf-8", "backslashreplace") for f in sub.recv_multipart()]}
            else:
                ans = {"timeout": True}
        else:
            ans = {"error": "unknown op " + op}
        out.write(json.dumps(ans) + "\n")
        out.flush()
    req.close()
    sub.close()
    ctx.term()


if __name__ == "__main__":
    main()
