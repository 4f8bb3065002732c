package openclaw

import (
	"errors"
	"fmt"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Native runs one request of the native protocol in process, as the
// control socket would (same decoding, validation, ops, limits and
// metrics), and returns the encoded reply, as the socket would send it.
// It is bound to the connection the dialect request came on.
type Native interface {
	Do(req *protocol.Request) []byte
}

// errNativeReply: the native reply could not be decoded (a bug).
var errNativeReply = errors.New("undecodable native reply")

// call runs op with args through n and decodes its result into result
// (nil: none wanted). A native error comes back as the *protocol.Error.
func call(n Native, op protocol.Op, args, result any) error {
	raw, err := protocol.Marshal(args)
	if err != nil {
		return fmt.Errorf("%s: encode args: %w", op, err)
	}
	rep, err := protocol.DecodeReplyNoCopy(n.Do(&protocol.Request{V: protocol.Version, Op: op, Args: raw}))
	if err != nil {
		return fmt.Errorf("%s: %w: %w", op, errNativeReply, err)
	}
	if !rep.OK {
		return rep.Error
	}
	if sr, ok := result.(**protocol.SubscribeResult); ok {
		// (payloads alias the reply: no copy of the output)
		if *sr, err = protocol.DecodeSubscribeResult(rep.Result); err != nil {
			return fmt.Errorf("%s: %w: %w", op, errNativeReply, err)
		}
		return nil
	}
	if err := rep.DecodeResult(result); err != nil {
		return fmt.Errorf("%s: %w: %w", op, errNativeReply, err)
	}
	return nil
}

// codeOf is the native error code of err ("" for none of the protocol's).
func codeOf(err error) protocol.Code {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// errorText is err as a dialect reply's error: the texts the dialect's
// clients look for where it has them, else the native message.
func errorText(err error) string {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return err.Error()
	}
	switch pe.Code {
	case protocol.CodeNotFound:
		return errNotFound
	case protocol.CodeAlreadyExists:
		return errAlreadyExists
	case protocol.CodeTooManyJobs:
		return errTooManyJobs + " (" + pe.Message + ")"
	}
	return pe.Message
}
