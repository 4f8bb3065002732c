package zmtp

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
	"golang.org/x/crypto/curve25519"
	"golang.org/x/crypto/nacl/box"
)

// CurveKey is a CURVE (Curve25519) key, public or secret. Its String is
// its Z85 form, as libzmq's zmq_curve_keypair writes it.
type CurveKey [32]byte

func (k CurveKey) String() string {
	s, _ := Z85Encode(k[:])
	return s
}

// ParseCurveKey reads a key in Z85 (40 characters).
func ParseCurveKey(s string) (CurveKey, error) {
	var k CurveKey
	s = strings.TrimSpace(s)
	if len(s) != 40 {
		return k, fmt.Errorf("CURVE key: want 40 Z85 characters, got %d", len(s))
	}
	b, err := Z85Decode(s)
	if err != nil {
		return k, fmt.Errorf("CURVE key: %w", err)
	}
	copy(k[:], b)
	return k, nil
}

// CurveKeyPair is a long-term CURVE key pair.
type CurveKeyPair struct {
	Public, Secret CurveKey
}

// NewCurveKeyPair makes a key pair from crypto/rand.
func NewCurveKeyPair() (CurveKeyPair, error) {
	pub, sec, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return CurveKeyPair{}, fmt.Errorf("generate CURVE key pair: %w", err)
	}
	return CurveKeyPair{Public: *pub, Secret: *sec}, nil
}

// CurveKeyPairFromSecret derives the public key of secret.
func CurveKeyPairFromSecret(secret CurveKey) (CurveKeyPair, error) {
	pub, err := curve25519.X25519(secret[:], curve25519.Basepoint)
	if err != nil {
		return CurveKeyPair{}, fmt.Errorf("derive CURVE public key: %w", err)
	}
	kp := CurveKeyPair{Secret: secret}
	copy(kp.Public[:], pub)
	return kp, nil
}

// Key files hold one key in Z85 on a line of its own; blank lines and
// lines starting with '#' are comments. A secret key file (curve.key) must
// be ours, not a symlink, and readable by us only (0600); a public key
// file (curve.pub) ours or root's and writable by nobody else (whoever
// could change a pinned key could take the server's place).
const (
	curveSecretHeader = "# exec-supervisor CURVE secret key (Z85, as zmq_curve_keypair writes it): keep it private\n"
	curvePublicHeader = "# exec-supervisor CURVE public key (Z85): give it to clients, which pin it\n"
	maxKeyFileBytes   = 4096
)

// CurvePublicPath is where the public key of the secret key file path is
// kept: path with ".key" replaced by ".pub" (or ".pub" added).
func CurvePublicPath(path string) string {
	return strings.TrimSuffix(path, ".key") + ".pub"
}

// parseKeyFile reads the one key of a key file's content.
func parseKeyFile(b []byte, path string) (CurveKey, error) {
	var found []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		found = append(found, line)
	}
	if len(found) != 1 {
		return CurveKey{}, fmt.Errorf("%s: want one Z85 key on a line of its own, found %d lines", path, len(found))
	}
	k, err := ParseCurveKey(found[0])
	if err != nil {
		return CurveKey{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ReadCurveSecretFile reads a secret key file (see CurvePublicPath) and
// derives its public key.
func ReadCurveSecretFile(path string) (CurveKeyPair, error) {
	b, err := statedir.ReadTrusted(path, true, false, maxKeyFileBytes)
	if err != nil {
		return CurveKeyPair{}, fmt.Errorf("read CURVE secret key: %w", err)
	}
	sec, err := parseKeyFile(b, path)
	if err != nil {
		return CurveKeyPair{}, fmt.Errorf("read CURVE secret key: %w", err)
	}
	return CurveKeyPairFromSecret(sec)
}

// ReadCurvePublicFile reads a public key file (a client's pinned server
// key, for one).
func ReadCurvePublicFile(path string) (CurveKey, error) {
	b, err := statedir.ReadTrusted(path, false, true, maxKeyFileBytes)
	if err != nil {
		return CurveKey{}, fmt.Errorf("read CURVE public key: %w", err)
	}
	k, err := parseKeyFile(b, path)
	if err != nil {
		return CurveKey{}, fmt.Errorf("read CURVE public key: %w", err)
	}
	return k, nil
}

// LoadOrCreateCurveKey returns the key pair of the secret key file path,
// creating it (and its public key file, see CurvePublicPath) when it does
// not exist: both 0600, written to a temporary file, synced and renamed.
// An existing public key file that does not match the secret key is
// rewritten. created says the pair is new.
func LoadOrCreateCurveKey(path string) (kp CurveKeyPair, created bool, err error) {
	kp, err = ReadCurveSecretFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if kp, err = NewCurveKeyPair(); err != nil {
			return kp, false, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return kp, false, fmt.Errorf("create CURVE key directory: %w", err)
		}
		if err := writeFileAtomic(path, curveSecretHeader+kp.Secret.String()+"\n"); err != nil {
			return kp, false, fmt.Errorf("write CURVE secret key: %w", err)
		}
		created = true
	} else if err != nil {
		return kp, false, err
	}
	pubPath := CurvePublicPath(path)
	if pub, perr := ReadCurvePublicFile(pubPath); perr != nil || pub != kp.Public {
		if err := writeFileAtomic(pubPath, curvePublicHeader+kp.Public.String()+"\n"); err != nil {
			return kp, created, fmt.Errorf("write CURVE public key: %w", err)
		}
	}
	return kp, created, nil
}

// writeFileAtomic writes content to path (0600): a temporary file in the
// same directory, synced, renamed over path, the directory synced.
func writeFileAtomic(path, content string) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // (gone after the rename)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
