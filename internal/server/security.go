package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
)

// loadOrCreateToken returns the tcp token, creating the token file (0600,
// never through a symlink) with 32 random bytes when it does not exist.
func loadOrCreateToken(path string) (tok string, created bool, err error) {
	tok, err = statedir.ReadToken(path)
	if err == nil {
		return tok, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("create token directory: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", false, fmt.Errorf("generate token: %w", err)
	}
	tok = hex.EncodeToString(b[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("create token file: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		os.Remove(path)
		return "", false, fmt.Errorf("write token file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", false, fmt.Errorf("write token file: %w", err)
	}
	return tok, true, nil
}

// policy returns the transport policy of one endpoint: tcp requires the
// token (unless explicitly insecure); ipc checks peer credentials.
func (s *Server) policy(endpoint string, maxFrame uint64) *zmtp.Policy {
	p := &zmtp.Policy{
		AllowUIDs: s.cfg.AllowUIDs, AllowGIDs: s.cfg.AllowGIDs,
		HandshakeTimeout: s.cfg.HandshakeTimeout, WriteTimeout: s.cfg.WriteTimeout,
		MaxFrameBytes: maxFrame, MaxConns: s.cfg.MaxConns,
		ReplyQueueBytes: s.cfg.ReplyQueueBytes, IdleEvictAfter: s.cfg.IdleEvictAfter,
		OnReject: func(reason string) { s.metrics.ConnRejected.WithLabelValues(reason).Inc() },
		Log:      limitedWarn(s.log, endpoint),
		Debug:    func(msg string, args ...any) { s.log.Debug(msg, append(args, "endpoint", endpoint)...) },
	}
	if endpoint == s.cfg.Event {
		p.OnDisconnect = s.metrics.SubDisconnects.Inc
	}
	if strings.HasPrefix(endpoint, "tcp://") && !s.cfg.InsecureTCP {
		p.Token = s.token
		p.LoopbackUIDs = s.cfg.TCPLoopbackUID
		p.Curve = s.curve
	}
	return p
}

// setupCurve loads the CURVE key pair (created on first start) and the
// allow-list of client keys, and says where they are.
func (s *Server) setupCurve() error {
	kp, created, err := zmtp.LoadOrCreateCurveKey(s.cfg.CurveKeyPath())
	if err != nil {
		return fmt.Errorf("--curve-key-file: %w", err)
	}
	clients := zmtp.NewCurveAllowList(s.cfg.CurveClientsPath())
	_, _, _, lerr := clients.Lookup(zmtp.CurveKey{})
	switch {
	case lerr != nil:
		return fmt.Errorf("--curve-clients: %w", lerr)
	case clients.Len() == 0:
		s.log.Warn("no CURVE client key is allowed yet: tcp clients are refused until their public keys are in the allow-list (read again when it changes)", "curveClients", clients.Path())
	}
	s.curve = &zmtp.CurveServer{Key: kp, Clients: clients}
	s.log.Info("tcp clients must use CURVE (ZMTP RFC 26) with the supervisor's public key and an allowed key of their own",
		"publicKey", kp.Public.String(), "publicKeyFile", zmtp.CurvePublicPath(s.cfg.CurveKeyPath()), "created", created,
		"curveClients", clients.Path(), "allowedKeys", clients.Len())
	return nil
}

// rejectLogsPerSecond bounds the transport's warnings (refused and cut
// connections) per endpoint: with sockets open to other users
// (--allow-uid/--allow-gid) or tcp, anyone who can connect could
// otherwise fill the log. The metric still counts every one.
const rejectLogsPerSecond = 10

// limitedWarn returns a Policy.Log that warns at most rejectLogsPerSecond
// times a second and says how many it left out.
func limitedWarn(log *slog.Logger, endpoint string) func(msg string, args ...any) {
	var mu sync.Mutex
	var window time.Time
	var n, left int
	return func(msg string, args ...any) {
		now := time.Now()
		mu.Lock()
		if now.Sub(window) >= time.Second {
			window, n = now, 0
		}
		n++
		if n > rejectLogsPerSecond {
			left++
			mu.Unlock()
			return
		}
		suppressed := left
		left = 0
		mu.Unlock()
		args = append(args, "endpoint", endpoint)
		if suppressed > 0 {
			args = append(args, "suppressed", suppressed)
		}
		log.Warn(msg, args...)
	}
}
