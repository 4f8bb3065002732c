package client

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
)

// Options configure a Client. Zero values mean the documented defaults.
type Options struct {
	// ControlAddress is the control endpoint; "" means the private default
	// ipc socket ($XDG_RUNTIME_DIR/exec-supervisor/control.sock, or
	// /tmp/exec-supervisor-<uid>/control.sock).
	ControlAddress string
	// EventAddress is the event endpoint; "" means the private default.
	EventAddress string
	// RequestTimeout bounds each request (an earlier context deadline
	// wins); 0 means 30 s.
	RequestTimeout time.Duration
	// ReconnectInterval is the pause between connection attempts; 0 means 1 s.
	ReconnectInterval time.Duration
	// MaxReconnectAttempts bounds connection attempts per request; 0 means 10.
	MaxReconnectAttempts int
	// DialTimeout bounds one connection attempt; 0 means 2 s.
	DialTimeout time.Duration
	// SubscribeMode is how Follow (and Job) get events: SubscribePush (the
	// zero value: the event socket, with backfill over the control socket)
	// or SubscribePoll (the control socket only, every PollInterval).
	SubscribeMode SubscribeMode
	// PollInterval is the poll period of SubscribePoll; 0 means 100 ms.
	PollInterval time.Duration
	// NoAutoBackfill turns off backfilling in push mode: missing events are
	// then reported as job.gap events to the FollowFunc instead of fetched.
	NoAutoBackfill bool
	// LocalPollJobs is how many jobs Poll follows in push mode to answer
	// their polls locally (see Poll); 0 means 16, negative none.
	LocalPollJobs int
	// LocalPollBytes bounds the output kept locally per such job (its
	// bytes, and 128 per event held); 0 or negative means 2 MiB (the
	// supervisor's default ring buffer).
	LocalPollBytes int
	// Token authenticates tcp connections (ZMTP PLAIN password). Empty
	// means: read the supervisor's default token file
	// (~/.local/state/exec-supervisor/token) when an endpoint is tcp.
	Token string
	// CurveServerKey, when set, makes tcp connections use ZMTP CURVE
	// (RFC 26: encrypted, both ends authenticated by key) instead of
	// Token: the supervisor's public key in Z85 (40 characters, as in its
	// curve.pub), pinned: a supervisor without its secret key is refused
	// (an error wrapping zmtp.ErrCurveServerKey, not retried).
	CurveServerKey string
	// CurveServerKeyFile is CurveServerKey read from a file (one Z85 key,
	// # comments; ours or root's, writable by nobody else). The value
	// wins when both are set.
	CurveServerKeyFile string
	// CurveSecretKey is this client's CURVE secret key in Z85; its public
	// key must be in the supervisor's allow-list (--curve-clients).
	// Required with a server key.
	CurveSecretKey string
	// CurveKeyFile is CurveSecretKey read from a file (the format of the
	// supervisor's curve.key: ours, not a symlink, mode 0600). The value
	// wins when both are set.
	CurveKeyFile string

	// tokenFound: Token was read from the default token file, so it goes
	// only to a listener of our own user on this machine.
	tokenFound bool
	// curve is the CURVE setup read by fill (nil without), curveErr why
	// it could not be read (every call fails with it).
	curve    *zmtp.CurveClient
	curveErr error
}

// SubscribeMode selects how events reach a follower.
type SubscribeMode string

// Subscribe modes.
const (
	SubscribePush SubscribeMode = "push"
	SubscribePoll SubscribeMode = "poll"
)

// dialOptions are how to connect to endpoint: the token or CURVE only
// for tcp.
func (o *Options) dialOptions(endpoint string) (zmtp.DialOptions, error) {
	d := zmtp.DialOptions{Timeout: o.DialTimeout}
	if strings.HasPrefix(endpoint, "tcp://") {
		if o.curveErr != nil {
			return d, o.curveErr
		}
		d.Token, d.TokenToOwnOnly, d.Curve = o.Token, o.tokenFound, o.curve
	}
	return d, nil
}

// curveSetup reads the CURVE options (see CurveServerKey); nil without.
func (o *Options) curveSetup() (*zmtp.CurveClient, error) {
	if o.CurveServerKey == "" && o.CurveServerKeyFile == "" && o.CurveSecretKey == "" && o.CurveKeyFile == "" {
		return nil, nil
	}
	var cc zmtp.CurveClient
	var err error
	switch {
	case o.CurveServerKey != "":
		if cc.Server, err = zmtp.ParseCurveKey(o.CurveServerKey); err != nil {
			return nil, fmt.Errorf("CURVE server key: %w", err)
		}
	case o.CurveServerKeyFile != "":
		if cc.Server, err = zmtp.ReadCurvePublicFile(o.CurveServerKeyFile); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("a CURVE key of the client's was given but not the supervisor's public key (CurveServerKey)")
	}
	switch {
	case o.CurveSecretKey != "":
		sec, err := zmtp.ParseCurveKey(o.CurveSecretKey)
		if err != nil {
			return nil, fmt.Errorf("CURVE secret key: %w", err)
		}
		if cc.Key, err = zmtp.CurveKeyPairFromSecret(sec); err != nil {
			return nil, err
		}
	case o.CurveKeyFile != "":
		if cc.Key, err = zmtp.ReadCurveSecretFile(o.CurveKeyFile); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("CURVE needs the client's own key pair too (CurveSecretKey or CurveKeyFile)")
	}
	return &cc, nil
}

func (o *Options) fill() {
	if o.ControlAddress == "" {
		o.ControlAddress = zmtp.DefaultControl()
	}
	if o.EventAddress == "" {
		o.EventAddress = zmtp.DefaultEvent()
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.ReconnectInterval <= 0 {
		o.ReconnectInterval = time.Second
	}
	if o.MaxReconnectAttempts <= 0 {
		o.MaxReconnectAttempts = 10
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.SubscribeMode == "" {
		o.SubscribeMode = SubscribePush
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 100 * time.Millisecond
	}
	if o.curve, o.curveErr = o.curveSetup(); o.curveErr != nil {
		o.curveErr = &CurveConfigError{Err: o.curveErr}
	}
	if o.Token == "" && o.curve == nil && (strings.HasPrefix(o.ControlAddress, "tcp://") || strings.HasPrefix(o.EventAddress, "tcp://")) {
		if tok, err := statedir.ReadToken(statedir.TokenFile()); err == nil {
			o.Token, o.tokenFound = tok, true
		}
	}
}

// CurveConfigError says the CURVE options (keys, key files) cannot be
// used; every call over tcp fails with it.
type CurveConfigError struct{ Err error }

func (e *CurveConfigError) Error() string { return "CURVE options: " + e.Err.Error() }

func (e *CurveConfigError) Unwrap() error { return e.Err }

// permanentDialError says a dial failed in a way another attempt will
// not change: the CURVE options are unusable, the supervisor is not the
// one whose key was pinned, or it refuses our key.
func permanentDialError(err error) bool {
	var ce *CurveConfigError
	var re *zmtp.RefusedError
	return errors.As(err, &ce) || errors.Is(err, zmtp.ErrCurveServerKey) ||
		errors.As(err, &re) && re.Reason == zmtp.CurveClientRefused
}
