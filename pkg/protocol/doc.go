// Package protocol is the exec-supervisor wire contract: message envelopes,
// op names, event kinds, error codes, limits, and their msgpack encoding.
//
// It does no I/O. Transport framing (ZeroMQ frames, topics) is described in
// docs/protocol.md; this package only turns bytes into validated values and
// back. Every decoder validates its input and never panics, whatever the
// bytes: a decode error is always a *Error with a stable Code that a server
// can send back to the client as is.
package protocol
