package zmtp

import (
	"os"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
