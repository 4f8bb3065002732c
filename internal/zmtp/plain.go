package zmtp

import "crypto/subtle"

// plainBodyOK checks a HELLO body: [user len][user][pass len][pass].
func plainBodyOK(b []byte, token string) bool {
	if len(b) < 1 || int(b[0]) > len(b)-1 {
		return false
	}
	b = b[1+int(b[0]):]
	if len(b) < 1 || int(b[0]) != len(b)-1 {
		return false
	}
	return subtle.ConstantTimeCompare(b[1:], []byte(token)) == 1
}

// errorReason is the reason of an ERROR command's body: [len][reason].
func errorReason(b []byte) string {
	if len(b) < 1 || int(b[0]) > len(b)-1 {
		return "no reason given"
	}
	return string(b[1 : 1+int(b[0])])
}
