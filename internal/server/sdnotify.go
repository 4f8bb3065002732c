package server

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// The supervisor under systemd (Type=notify): it says READY=1 once both
// sockets listen and recovery is done, STOPPING=1 as it shuts down, and,
// with WatchdogSec=, pets the watchdog while its control socket answers.
// (sd_notify(3); the notify socket of jobs is internal/notify's.)

// notifySystemd sends state to the service manager's notify socket, if
// one was given (Config.NotifySocket).
func (s *Server) notifySystemd(state string) {
	if s.cfg.NotifySocket == "" {
		return
	}
	if err := sdNotify(s.cfg.NotifySocket, state); err != nil {
		s.log.Warn("systemd notify failed", "state", strings.SplitN(state, "\n", 2)[0], "err", err)
	}
}

// sdNotify writes state as one datagram to socket (a path, or an abstract
// name starting with @).
func sdNotify(socket, state string) error {
	name := socket
	if strings.HasPrefix(name, "@") {
		name = "\x00" + name[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify socket %s: %w", socket, err)
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify socket %s: %w", socket, err)
	}
	return nil
}

// watchdogLoop pets systemd's watchdog (WATCHDOG=1) every half
// Config.WatchdogInterval, each time its control socket answered a health
// request, sent through a connection of its own as any client's: a
// supervisor that stops serving requests (a deadlock, a stuck loop) stops
// petting, and systemd restarts it.
func (s *Server) watchdogLoop() {
	defer s.wg.Done()
	every := s.cfg.WatchdogInterval / 2
	t := time.NewTicker(every)
	defer t.Stop()
	var c *zmtp.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	failing := false
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.draining:
			return // (stopping: STOPPING=1 was said; the watchdog no longer counts)
		case <-t.C:
		}
		err := s.selfCheck(&c, every)
		if err != nil {
			if c != nil {
				c.Close()
				c = nil
			}
			if !failing {
				s.log.Warn("watchdog: the control socket did not answer; not petting systemd's watchdog", "err", err)
			}
			failing = true
			continue
		}
		failing = false
		s.notifySystemd("WATCHDOG=1")
	}
}

// selfCheck sends a health request on *c (dialled if nil) and waits up to
// d for its reply.
func (s *Server) selfCheck(c **zmtp.Client, d time.Duration) error {
	if *c == nil {
		o := zmtp.DialOptions{Timeout: d}
		if strings.HasPrefix(s.cfg.Control, "tcp://") {
			o.Token = s.token
			if s.curve != nil { // (the server's own key is always admitted)
				o.Curve = &zmtp.CurveClient{Server: s.curve.Key.Public, Key: s.curve.Key}
			}
		}
		cl, err := zmtp.DialClientWith(s.ctx, "DEALER", s.cfg.Control, o)
		if err != nil {
			return err
		}
		*c = cl
	}
	body, err := protocol.EncodeRequest("watchdog", protocol.OpHealth, nil)
	if err != nil {
		return err
	}
	if err := (*c).Send(body); err != nil {
		return err
	}
	got := make(chan error, 1)
	go func() { // (bounded: the connection is closed below if it waits too long)
		frames, err := (*c).Recv()
		if err == nil && len(frames) > 0 {
			_, err = protocol.DecodeReply(frames[len(frames)-1])
		}
		got <- err
	}()
	select {
	case err := <-got:
		return err
	case <-time.After(d):
		(*c).Close() // (ends the Recv above)
		<-got
		*c = nil
		return fmt.Errorf("no health reply within %v", d)
	}
}
