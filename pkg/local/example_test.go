package local_test

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/local"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// A gateway that runs commands in its own process until a supervisor is
// there, then through it: jobs already running stay where they started.
// (Not run: it wants a supervisor on the default sockets.)
func Example_dispatcher() {
	ctx := context.Background()
	engine := local.New(0) // (call local.MaybeRunLimitsHelper first in main for rlimits)
	defer engine.Close(ctx)
	c := client.New(client.Options{})
	defer c.Close()
	d := client.NewDispatcher(c, engine) // starts in origin mode: the engine

	job, err := d.Start(ctx, protocol.SpawnArgs{Shell: "echo in-process"}, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer job.Close()
	io.Copy(os.Stdout, job.Stdout())
	if _, err := job.Wait(ctx); err != nil {
		fmt.Println(err)
	}
	// New jobs through the supervisor from now on, if it is healthy.
	if err := d.SetMode(ctx, client.ModeZMQ); err != nil {
		fmt.Println("staying in origin mode:", err)
	}
}
