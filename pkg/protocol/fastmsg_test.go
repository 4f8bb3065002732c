package protocol

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// filler sets every field of a value at random, by reflection, so that a
// field added to a struct and not to its hand-written codec fails the
// tests below.
type filler struct {
	r      *rand.Rand
	mapMax int  // most entries in a map (1 keeps Marshal's output deterministic)
	nested bool // fill pointers to structs too (the fast paths must decline them)
}

var fillStrings = []string{"", "a", "/bin/true", strings.Repeat("x", 31), strings.Repeat("y", 32),
	strings.Repeat("z", 255), strings.Repeat("w", 256), "héllo\x01"}

var fillFloats = []float64{0, 1, -1, 0.5, 96.25, 1e-9, 1e300, -math.MaxFloat64, math.SmallestNonzeroFloat64}

// longString is a str32 value, used now and then (it is slow under -race).
var longString = strings.Repeat("v", 70000)

var fillInts = []int64{0, 1, -1, 31, 127, 128, -32, -33, -128, -129, 255, 256, 32767, 32768, 65535, 65536,
	-32768, -32769, 1 << 31, -1<<31 - 1, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64}

func (f *filler) fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if f.r.IntN(50) == 0 {
			v.SetString(longString)
			return
		}
		v.SetString(fillStrings[f.r.IntN(len(fillStrings))])
	case reflect.Int, reflect.Int64, reflect.Int32:
		x := fillInts[f.r.IntN(len(fillInts))]
		if v.OverflowInt(x) {
			x = int64(int32(x))
		}
		v.SetInt(x)
	case reflect.Uint64, reflect.Uint16, reflect.Uint32, reflect.Uint:
		x := uint64(fillInts[f.r.IntN(len(fillInts))])
		if v.OverflowUint(x) {
			x &= 0xffff
		}
		v.SetUint(x)
	case reflect.Bool:
		v.SetBool(f.r.IntN(2) == 1)
	case reflect.Float64:
		v.SetFloat(fillFloats[f.r.IntN(len(fillFloats))])
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 || f.r.IntN(3) == 0 {
			v.SetZero()
			return
		}
		n := 1 + f.r.IntN(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			f.fill(s.Index(i))
		}
		v.Set(s)
	case reflect.Map:
		if f.r.IntN(3) == 0 {
			v.SetZero()
			return
		}
		m := reflect.MakeMap(v.Type())
		for range 1 + f.r.IntN(f.mapMax) {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			f.fill(k)
			f.fill(e)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Pointer:
		if f.r.IntN(2) == 0 || (v.Type().Elem().Kind() == reflect.Struct && !f.nested) {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem())
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	}
}

func genericDecode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := unmarshal(b, &v, "test"); err != nil {
		t.Fatalf("generic decode: %v", err)
	}
	return v
}

// TestFastMessagesMatchGeneric: the hand-written encoders write exactly
// Marshal's bytes (maps of one entry) or bytes that decode to the same
// value (larger maps, whose order Marshal leaves to the map), and the
// hand-written decoders yield what the generic decoder yields, for
// values with every field set at random.
func TestFastMessagesMatchGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const iterations = 600
	// The decoders may decline extreme values (a lastSeq above MaxInt64,
	// say): the generic decoder takes those. What they accept must match.
	declined := map[string]int{}
	decoded := func(what string, ok bool, got, want any) {
		t.Helper()
		if !ok {
			declined[what]++
		} else if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %.600v, generic %.600v", what, got, want)
		}
	}
	defer func() {
		for what, n := range declined {
			if n > iterations/4 {
				t.Errorf("%s declined %d of %d values", what, n, iterations)
			}
		}
	}()
	for iter := range iterations {
		f := &filler{r: r, mapMax: 1}
		if iter%3 == 0 {
			f.mapMax = 4
		}
		exact := f.mapMax == 1
		same := func(what string, fast, want []byte, decodeBoth func(fast, want []byte) (any, any)) {
			t.Helper()
			if exact && !bytes.Equal(fast, want) {
				t.Fatalf("%s (iteration %d): fast encoding differs from Marshal\nfast %.300x\nwant %.300x", what, iter, fast, want)
			}
			if a, b := decodeBoth(fast, want); !reflect.DeepEqual(a, b) {
				t.Fatalf("%s (iteration %d): decodes differently\nfast %.600v\nwant %.600v", what, iter, a, b)
			}
		}

		var a SpawnArgs
		f.fill(reflect.ValueOf(&a).Elem())
		want, _ := Marshal(&a)
		fast, ok := appendSpawnArgs(nil, &a)
		if !ok {
			t.Fatal("appendSpawnArgs declined flat args")
		}
		same("SpawnArgs", fast, want, func(x, y []byte) (any, any) {
			return genericDecode[SpawnArgs](t, x), genericDecode[SpawnArgs](t, y)
		})
		var got SpawnArgs
		ok = fastSpawnArgs(want, &got)
		decoded("fastSpawnArgs", ok, got, genericDecode[SpawnArgs](t, want))

		// The whole request: envelope and args.
		req, err := EncodeRequest("id-1", OpSpawn, &a)
		if err != nil {
			t.Fatal(err)
		}
		wantReq, _ := Marshal(&Request{V: Version, ID: "id-1", Op: OpSpawn, Args: want})
		same("request", req, wantReq, func(x, y []byte) (any, any) {
			// Args compared decoded (their maps' order may differ).
			rx, ry := genericDecode[Request](t, x), genericDecode[Request](t, y)
			ax, ay := genericDecode[SpawnArgs](t, rx.Args), genericDecode[SpawnArgs](t, ry.Args)
			rx.Args, ry.Args = nil, nil
			return []any{rx, ax}, []any{ry, ay}
		})
		fr, ok := fastRequest(wantReq)
		if !ok {
			fr = &Request{}
		}
		decoded("fastRequest", ok, *fr, genericDecode[Request](t, wantReq))

		var info JobInfo
		f.fill(reflect.ValueOf(&info).Elem())
		if iter%2 == 0 {
			info.Usage = &Usage{}
			f.fill(reflect.ValueOf(info.Usage).Elem())
		}
		res := SpawnResult{JobID: info.JobID, Job: info}
		wantRes, _ := Marshal(res)
		fastRes, ok := fastResult(nil, res)
		if !ok {
			t.Fatal("fastResult declined a flat job")
		}
		same("SpawnResult", fastRes, wantRes, func(x, y []byte) (any, any) {
			return genericDecode[SpawnResult](t, x), genericDecode[SpawnResult](t, y)
		})
		var gotRes SpawnResult
		ok = fastSpawnResult(wantRes, &gotRes)
		decoded("fastSpawnResult", ok, gotRes, genericDecode[SpawnResult](t, wantRes))
		rep, err := OKReply("id-2", res)
		if err != nil {
			t.Fatal(err)
		}
		wantRep, _ := Marshal(&Reply{V: Version, ID: "id-2", OK: true, Result: wantRes})
		same("reply", rep, wantRep, func(x, y []byte) (any, any) {
			rx, ry := genericDecode[Reply](t, x), genericDecode[Reply](t, y)
			sx, sy := genericDecode[SpawnResult](t, rx.Result), genericDecode[SpawnResult](t, ry.Result)
			rx.Result, ry.Result = nil, nil
			return []any{rx, sx}, []any{ry, sy}
		})

		// The results carrying many jobs.
		var other JobInfo
		f.fill(reflect.ValueOf(&other).Elem())
		jobs := []JobInfo{info, other}
		if iter%5 == 0 {
			jobs = nil
		}
		for _, st := range []StatusResult{{Job: &info}, {Jobs: jobs}} {
			wantSt, _ := Marshal(st)
			fastSt, ok := fastResult(nil, st)
			if !ok {
				t.Fatal("fastResult declined a status result without limits")
			}
			same("StatusResult", fastSt, wantSt, func(x, y []byte) (any, any) {
				return genericDecode[StatusResult](t, x), genericDecode[StatusResult](t, y)
			})
			var gotSt StatusResult
			ok = fastStatusResult(wantSt, &gotSt)
			decoded("fastStatusResult", ok, gotSt, genericDecode[StatusResult](t, wantSt))
		}
		lj := ListJobsResult{Jobs: jobs, More: iter%3 == 0, Next: info.JobID}
		wantLJ, _ := Marshal(lj)
		fastLJ, ok := fastResult(nil, &lj)
		if !ok {
			t.Fatal("fastResult declined a list-jobs result without limits")
		}
		same("ListJobsResult", fastLJ, wantLJ, func(x, y []byte) (any, any) {
			return genericDecode[ListJobsResult](t, x), genericDecode[ListJobsResult](t, y)
		})
		var gotLJ ListJobsResult
		ok = fastListJobsResult(wantLJ, &gotLJ)
		decoded("fastListJobsResult", ok, gotLJ, genericDecode[ListJobsResult](t, wantLJ))

		var sp StartedPayload
		f.fill(reflect.ValueOf(&sp).Elem())
		wantSP, _ := Marshal(sp)
		fastSP, _ := fastPayload(sp)
		same("StartedPayload", fastSP, wantSP, func(x, y []byte) (any, any) {
			return genericDecode[StartedPayload](t, x), genericDecode[StartedPayload](t, y)
		})
		var ep ExitPayload
		f.fill(reflect.ValueOf(&ep).Elem())
		wantEP, _ := Marshal(ep)
		fastEP, _ := fastPayload(&ep)
		same("ExitPayload", fastEP, wantEP, func(x, y []byte) (any, any) {
			return genericDecode[ExitPayload](t, x), genericDecode[ExitPayload](t, y)
		})
	}
}

// TestFastPathsDeclineNested: values with nested structures (pty,
// restart, limits, usage) go the generic way, and come out the same
// through the public functions.
func TestFastPathsDeclineNested(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	declined := 0
	for range 500 {
		f := &filler{r: r, mapMax: 1, nested: true}
		var a SpawnArgs
		f.fill(reflect.ValueOf(&a).Elem())
		body, err := EncodeRequest("x", OpSpawn, &a)
		if err != nil {
			t.Fatal(err)
		}
		req, err := DecodeRequest(body, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got SpawnArgs
		_ = DecodeArgs(req, &got) // Validate may refuse the random values; decoding is what is compared
		want := genericDecode[SpawnArgs](t, req.Args)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeArgs: %+v, generic %+v", got, want)
		}
		if _, ok := appendSpawnArgs(nil, &a); !ok {
			declined++
		}

		var info JobInfo
		f.fill(reflect.ValueOf(&info).Elem())
		rep, err := OKReply("y", SpawnResult{JobID: "j", Job: info})
		if err != nil {
			t.Fatal(err)
		}
		dr, err := DecodeReply(rep)
		if err != nil {
			t.Fatal(err)
		}
		var gotRes SpawnResult
		if err := dr.DecodeResult(&gotRes); err != nil {
			t.Fatal(err)
		}
		if want := genericDecode[SpawnResult](t, dr.Result); !reflect.DeepEqual(gotRes, want) {
			t.Fatalf("DecodeResult: %+v, generic %+v", gotRes, want)
		}
	}
	if declined == 0 {
		t.Fatal("no nested value was generated")
	}
}

// FuzzFastDecodeMatchesGeneric: whatever bytes the hand-written decoders
// accept, the generic decoder accepts too and decodes to the same value.
func FuzzFastDecodeMatchesGeneric(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		fl := &filler{r: r, mapMax: 3}
		var a SpawnArgs
		fl.fill(reflect.ValueOf(&a).Elem())
		b, _ := EncodeRequest("s", OpSpawn, &a)
		f.Add(b)
		var info JobInfo
		fl.fill(reflect.ValueOf(&info).Elem())
		b, _ = Marshal(SpawnResult{JobID: "j", Job: info})
		f.Add(b)
		info.Usage = &Usage{Processes: 2, RSSBytes: 1 << 20, CPUSeconds: 1.5, CPUPercent: 12.5, SampledAt: 7}
		b, _ = Marshal(StatusResult{Jobs: []JobInfo{info, {JobID: "k"}}})
		f.Add(b)
		b, _ = Marshal(ListJobsResult{Jobs: []JobInfo{info}, More: true, Next: "c"})
		f.Add(b)
	}
	// Duplicate keys: the generic decoder keeps the first array when the
	// second is nil and merges maps and nested structs.
	dup := func(kv ...any) []byte {
		w := newMW(nil)
		for i := 0; i < len(kv); i += 2 {
			w.key(kv[i].(string))
			v, _ := Marshal(kv[i+1])
			w.b = append(w.b, v...)
		}
		return w.end()
	}
	f.Add(dup("argv", []string{"a"}, "argv", nil))
	f.Add(dup("job", map[string]any{"usage": map[string]any{"processes": 1}}, "job", nil))
	job := dup("usage", map[string]any{"cpuSeconds": float32(1.5)}, "usage", nil)
	jw := newMW(nil)
	jw.key("jobs")
	jw.b = append(appendArrayLen(jw.b, 1), job...)
	f.Add(jw.end())
	f.Add(dup("jobs", []any{map[string]any{"usage": map[string]any{"cpuPercent": 3, "sampledAt": 1}}}, "jobs", nil))
	f.Add(dup("shell", "x", "argv", []string{"a"}, "argv", nil))
	f.Add(dup("env", map[string]string{"a": "b"}, "env", map[string]string{"c": "d"}))
	f.Add(dup("labels", map[string]string{"a": "b"}, "labels", nil))
	f.Add(dup("jobId", "j", "job", map[string]any{"argv": []string{"a"}}, "job", map[string]any{"argv": nil}))
	f.Add(dup("v", 2, "id", "x", "op", "spawn", "args", map[string]any{"argv": []string{"a"}}, "args", nil))
	// Strings that are not UTF-8 (refused by both request decoders; the
	// fast one leaves them to the generic one, which names them).
	f.Add(dup("argv", []string{"a", "\xff"}))
	f.Add(dup("shell", []byte("\xc3("), "labels", map[string]string{"k\xfe": "v"}))
	f.Add(dup("v", 2, "id", "x\xff", "op", "health"))
	f.Add(dup("argv", []string{"a"}, "extra", "\xe2\x82"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if req, ok := fastRequest(b); ok {
			var g Request
			if err := unmarshal(b, &g, "x"); err != nil {
				t.Fatalf("fastRequest accepted what the generic decoder refuses (%v): %x", err, b)
			}
			if !reflect.DeepEqual(*req, g) {
				t.Fatalf("fastRequest %+v, generic %+v", *req, g)
			}
			if err := decodeRequestValue(b, new(Request), "x"); err != nil {
				t.Fatalf("fastRequest accepted what the request decoder refuses (%v): %x", err, b)
			}
		}
		var a SpawnArgs
		if fastSpawnArgs(b, &a) {
			var g SpawnArgs
			if err := unmarshal(b, &g, "x"); err != nil {
				t.Fatalf("fastSpawnArgs accepted what the generic decoder refuses (%v): %x", err, b)
			}
			if !reflect.DeepEqual(a, g) {
				t.Fatalf("fastSpawnArgs %+v, generic %+v", a, g)
			}
			if err := decodeRequestValue(b, new(SpawnArgs), "x"); err != nil {
				t.Fatalf("fastSpawnArgs accepted what the request decoder refuses (%v): %x", err, b)
			}
		}
		var st StatusResult
		if fastStatusResult(b, &st) {
			var g StatusResult
			if err := unmarshal(b, &g, "x"); err != nil {
				t.Fatalf("fastStatusResult accepted what the generic decoder refuses (%v): %x", err, b)
			}
			if !reflect.DeepEqual(noNaN(st.Jobs, st.Job), noNaN(g.Jobs, g.Job)) {
				t.Fatalf("fastStatusResult %+v, generic %+v", st, g)
			}
		}
		var lj ListJobsResult
		if fastListJobsResult(b, &lj) {
			var g ListJobsResult
			if err := unmarshal(b, &g, "x"); err != nil {
				t.Fatalf("fastListJobsResult accepted what the generic decoder refuses (%v): %x", err, b)
			}
			if !reflect.DeepEqual(noNaN(lj.Jobs, nil), noNaN(g.Jobs, nil)) || lj.More != g.More || lj.Next != g.Next {
				t.Fatalf("fastListJobsResult %+v, generic %+v", lj, g)
			}
		}
		var res SpawnResult
		if fastSpawnResult(b, &res) {
			var g SpawnResult
			if err := unmarshal(b, &g, "x"); err != nil {
				t.Fatalf("fastSpawnResult accepted what the generic decoder refuses (%v): %x", err, b)
			}
			if !reflect.DeepEqual(res, g) {
				t.Fatalf("fastSpawnResult %+v, generic %+v", res, g)
			}
		}
	})
}

// noNaN returns job and jobs with their usages' NaN floats (which
// DeepEqual finds unequal to themselves) made a value they cannot take.
func noNaN(jobs []JobInfo, job *JobInfo) []JobInfo {
	out := slices.Clone(jobs)
	if job != nil {
		out = append(out, *job)
	}
	for i := range out {
		if u := out[i].Usage; u != nil {
			c := *u
			for _, f := range []*float64{&c.CPUSeconds, &c.CPUPercent} {
				if math.IsNaN(*f) {
					*f = math.Inf(-1)
				}
			}
			out[i].Usage = &c
		}
	}
	return out
}

// TestFastEncodersTakeNilPointers: a nil pointer is encoded as Marshal
// encodes it (msgpack nil), not dereferenced.
func TestFastEncodersTakeNilPointers(t *testing.T) {
	if b, err := EncodeRequest("x", OpSpawn, (*SpawnArgs)(nil)); err != nil || len(b) == 0 {
		t.Fatalf("request with nil args: %v", err)
	}
	b, err := OKReply("x", (*SpawnResult)(nil))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Marshal(&Reply{V: Version, ID: "x", OK: true, Result: []byte{0xc0}})
	if !bytes.Equal(b, want) {
		t.Fatalf("reply with nil result: %x, want %x", b, want)
	}
	for _, p := range []any{(*ExitPayload)(nil), (*StartedPayload)(nil)} {
		ev, err := NewEvent("j", 1, 1, KindExited, p)
		if err != nil || !bytes.Equal(ev.Payload, []byte{0xc0}) {
			t.Fatalf("%T: payload %x, %v", p, ev.Payload, err)
		}
	}
}
