package server

import (
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Every op of the protocol has its handler, and the table has no other.
func TestOpTable(t *testing.T) {
	for _, op := range protocol.Ops {
		if handlers[op] == nil {
			t.Errorf("op %s has no handler", op)
		}
	}
	if len(handlers) != len(protocol.Ops) {
		t.Errorf("%d handlers for %d ops", len(handlers), len(protocol.Ops))
	}
}
