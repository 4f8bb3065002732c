package cpuhome

import (
	"os"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/internal/leakcheck"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }
