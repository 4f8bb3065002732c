package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// (The examples talk to a supervisor on the default private ipc sockets:
// TestMain starts one there, in the test's own runtime directory.)

// Start a job, stream its output as it comes, and wait for its exit code.
func ExampleClient_Start() {
	c := client.New(client.Options{}) // the default private ipc sockets
	defer c.Close()
	ctx := context.Background()

	job, err := c.Start(ctx, protocol.SpawnArgs{Shell: "echo hello; sleep 0.1; echo world; exit 3"}, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer job.Close()
	if _, err := io.Copy(os.Stdout, job.Stdout()); err != nil {
		log.Fatal(err) // (an *OutputLostError, or following failed)
	}
	end, err := job.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reason:", end.Reason, "exit code:", *end.ExitCode)
	// Output:
	// hello
	// world
	// reason: exit exit code: 3
}

// Spawn a job and wait for its end in one round trip, then read what it
// printed.
func ExampleClient_SpawnWait() {
	c := client.New(client.Options{})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	info, finished, err := c.SpawnWait(ctx, protocol.SpawnArgs{Argv: []string{"uname", "-s"}}, 20*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if !finished {
		log.Fatalf("job %s still running", info.JobID) // (c.Wait can wait on)
	}
	out, err := c.Poll(ctx, info.JobID, 0, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(info.Reason, ": ")
	for _, ch := range out.Chunks {
		fmt.Printf("%s", ch.Data)
	}
	// Output:
	// exit: Linux
}

// A reader that comes too late for part of the output gets an
// *OutputLostError in place of the missing bytes, then the rest: here the
// job printed 3 MiB, more than the supervisor retains (--ring-buffer,
// 2 MiB by default), before anyone read it.
func ExampleOutputLostError() {
	c := client.New(client.Options{})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	info, _, err := c.SpawnWait(ctx, protocol.SpawnArgs{Shell: "head -c 3145728 /dev/zero"}, 20*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	job := c.Open(info.JobID, 0) // follow it from its first event
	defer job.Close()
	var got int64
	for {
		n, err := io.Copy(io.Discard, job.Stdout())
		got += n
		var lost *client.OutputLostError
		if errors.As(err, &lost) {
			fmt.Println("lost:", lost.Reason)
			continue // the rest of the output follows
		}
		if err != nil {
			log.Fatal(err)
		}
		break // io.Copy: nil at the end of the output
	}
	fmt.Println("read the rest:", got > 0 && got < 3145728)
	// Output:
	// lost: not-retained
	// read the rest: true
}

// A pool of supervisors found through DNS (a Kubernetes headless
// Service): a session's jobs go to one of them, every op to the job's
// own. (Not run: it needs the supervisors.)
func ExamplePool() {
	pool, err := client.NewPool(client.PoolOptions{
		DNS:    &client.PoolDNS{Name: "exec-supervisor.default.svc.cluster.local", ControlPort: 18790, EventPort: 18791},
		Client: client.Options{CurveServerKeyFile: "/keys/supervisor.pub", CurveKeyFile: "/keys/gateway.key"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	job, err := pool.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"make", "test"}, SessionID: "agent-17"})
	if err != nil {
		log.Fatal(err)
	}
	err = pool.Follow(ctx, job.JobID, 1, func(ev protocol.Event) error {
		fmt.Println(job.Member, ev.Kind)
		return nil
	})
	var down *client.MemberError
	if errors.As(err, &down) && errors.Is(err, client.ErrMemberDown) {
		log.Printf("the supervisor at %s went away; job %s is reported once it is back", down.Member, job.JobID)
	}
}
