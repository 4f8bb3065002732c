// Package openclaw speaks the JSON dialect of OpenClaw's Node exec
// supervisor (its gateway client, client.ts on zeromq.js), so that the
// supervisor is a drop-in replacement for it: a control request whose
// body starts with '{' is a JSON request of that dialect, answered with a
// single-frame JSON reply, and job events go out, to subscribers of
// "exec:" topics, as [exec:<jobId>, JSON event].
//
// It translates at the wire level and nothing more: each JSON request
// becomes one or more requests of the native protocol (pkg/protocol), run
// in process through the server's own op handling (Native), and their
// results or errors become the JSON reply; native events become JSON
// events (Events). It knows nothing of the job engine, so the engine's
// rules (limits, validation, kill path, retention, journal) hold for
// dialect clients exactly as for native ones.
//
// It deliberately does not: keep jobs or state of its own (but the few
// bytes of a UTF-8 character split between two output events on their
// way to subscribers); speak the dialect's journal file, configuration
// or command line (the supervisor's own apply); open sockets; or copy
// the Node server's quirks where they lose things (jobs are killed by
// the native kill path: TERM to the whole group, grace, KILL; output is
// decoded as UTF-8 across reads). docs/openclaw.md describes the dialect
// as implemented here.
package openclaw
