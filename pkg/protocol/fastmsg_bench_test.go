package protocol

import "testing"

// BenchmarkSpawnCodec: the spawn path's messages through the hand-written
// codecs (fast-*) against the generic msgpack path (generic-*), same run.
func BenchmarkSpawnCodec(b *testing.B) {
	args := &SpawnArgs{Argv: []string{"/bin/true"}, Labels: map[string]string{"agent": "a1"}}
	ec := 0
	res := SpawnResult{JobID: "j-0123456789abcdef", Job: JobInfo{JobID: "j-0123456789abcdef", State: StateRunning,
		Argv: []string{"/bin/true"}, Pid: 12345, Pgid: 12345, CreatedAt: 1, StartedAt: 2, ExitCode: &ec,
		Cgroup: "/sys/fs/cgroup/exec-supervisor/j-0123456789abcdef"}}
	reqBody, _ := EncodeRequest("c-1", OpSpawn, args)
	repBody, _ := OKReply("c-1", res)
	b.Run("encode-request", func(b *testing.B) {
		b.Run("fast", func(b *testing.B) {
			for range b.N {
				_, _ = EncodeRequest("c-1", OpSpawn, args)
			}
		})
		b.Run("generic", func(b *testing.B) {
			for range b.N {
				raw, _ := Marshal(args)
				_, _ = Marshal(&Request{V: Version, ID: "c-1", Op: OpSpawn, Args: raw})
			}
		})
	})
	b.Run("decode-request", func(b *testing.B) {
		b.Run("fast", func(b *testing.B) {
			for range b.N {
				req, _ := DecodeRequest(reqBody, 0)
				var a SpawnArgs
				_ = DecodeArgs(req, &a)
			}
		})
		b.Run("generic", func(b *testing.B) {
			for range b.N {
				var req Request
				_ = unmarshal(reqBody, &req, "x")
				var a SpawnArgs
				_ = unmarshal(req.Args, &a, "x")
			}
		})
	})
	b.Run("encode-reply", func(b *testing.B) {
		b.Run("fast", func(b *testing.B) {
			for range b.N {
				_, _ = OKReply("c-1", res)
			}
		})
		b.Run("generic", func(b *testing.B) {
			for range b.N {
				raw, _ := Marshal(res)
				_, _ = Marshal(&Reply{V: Version, ID: "c-1", OK: true, Result: raw})
			}
		})
	})
	b.Run("decode-reply", func(b *testing.B) {
		b.Run("fast", func(b *testing.B) {
			for range b.N {
				r, _ := DecodeReplyNoCopy(repBody)
				var sr SpawnResult
				_ = r.DecodeResult(&sr)
			}
		})
		b.Run("generic", func(b *testing.B) {
			for range b.N {
				var r Reply
				_ = unmarshal(repBody, &r, "x")
				var sr SpawnResult
				_ = unmarshal(r.Result, &sr, "x")
			}
		})
	})
}
