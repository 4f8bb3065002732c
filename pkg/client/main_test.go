package client_test

import (
	"os"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/internal/leakcheck"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
)

func TestMain(m *testing.M) {
	// (TestLocalLimits' jobs start through this binary as the helper.)
	client.MaybeRunLimitsHelper()
	os.Exit(leakcheck.Main(m))
}
