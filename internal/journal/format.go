package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Version is the journal file format version: 2, the version of OpenClaw's
// Node exec supervisor's journal, of which the file is a superset.
// Version 1 files (our records under "jobs", no OpenClaw view) are still
// read.
const Version = 2

// versionRecordsOnly is the format before the OpenClaw view: the records
// were the document's "jobs".
const versionRecordsOnly = 1

// File is the on-disk document (Version 2). It is OpenClaw's journal,
// {"version": 2, "updatedAtMs", "jobs": [...]} with "jobs" the jobs not yet
// ended as the Node supervisor journals them, and beside it what this
// supervisor recovers from: its instance, its intents file and a Record of
// every job it journals ("records"). Only the records are read back; the
// OpenClaw view is written for OpenClaw's tools and tests (and read only
// from a Node supervisor's own journal, see Load).
type File struct {
	Version int `json:"version"`
	// WrittenAt is when the document was written, in ms since the Unix
	// epoch (OpenClaw's updatedAtMs).
	WrittenAt int64 `json:"updatedAtMs"`
	// OpenClaw is the OpenClaw view: the jobs not yet ended (pending,
	// running, exiting) when the document was written, as the caller
	// gives them (nil is written as none).
	OpenClaw   []OpenClawJob `json:"jobs"`
	InstanceID string        `json:"instanceId"`
	Pid        int           `json:"pid"`
	// IntentsGeneration and IntentsCovered name the intents file
	// generation and its last line that the document covers (see
	// Intents): lines past it record job starts the document does not.
	IntentsGeneration string `json:"intentsGeneration,omitempty"`
	IntentsCovered    uint64 `json:"intentsCovered,omitempty"`
	// Jobs are the records of the jobs journaled: running ones and
	// services, and the most recently finished ones.
	Jobs []Record `json:"records"`
	// Dropped (not stored) says which records Load left out as invalid
	// (the others are used), and KeptAt where the file as read was copied.
	Dropped []string `json:"-"`
	KeptAt  string   `json:"-"`
	// Imported (not stored) is the number of jobs Load took from a
	// journal OpenClaw's Node supervisor wrote (see importOpenClaw).
	Imported int `json:"-"`
}

// OpenClawJob is a job not yet ended as OpenClaw's Node supervisor
// journals it: dialect state (pending, running, exiting), dialect seq of
// its newest event (-1: none), its command as the dialect shows it.
type OpenClawJob struct {
	JobID       string `json:"jobId"`
	Command     string `json:"command"`
	Cwd         string `json:"cwd,omitempty"`
	StartedAtMs int64  `json:"startedAtMs"`
	State       string `json:"state"`
	LastSeq     int64  `json:"lastSeq"`
	// Pid is the job's process (0, left out: not started yet).
	Pid int `json:"pid,omitempty"`
}

// fileV1 is the document of Version 1.
type fileV1 struct {
	Version           int      `json:"version"`
	InstanceID        string   `json:"instanceId"`
	Pid               int      `json:"pid"`
	WrittenAt         int64    `json:"writtenAt"`
	IntentsGeneration string   `json:"intentsGeneration,omitempty"`
	IntentsCovered    uint64   `json:"intentsCovered,omitempty"`
	Jobs              []Record `json:"jobs"`
}

// Parse reads a journal document of either version (or OpenClaw's), and
// leaves out the records that cannot be used (doc.Dropped says why).
func Parse(b []byte) (*File, error) {
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileBytes)
	}
	// Which document: its version, and whether it is ours (OpenClaw's has
	// neither an instance nor records).
	var head struct {
		Version    *int            `json:"version"`
		InstanceID *string         `json:"instanceId"`
		Records    json.RawMessage `json:"records"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("not a journal: %w", err)
	}
	var doc *File
	switch {
	case head.Version == nil:
		return nil, errors.New("not a journal: no version")
	case *head.Version == versionRecordsOnly:
		var v1 fileV1
		if err := decodeStrict(b, &v1); err != nil {
			return nil, err
		}
		doc = &File{Version: Version, WrittenAt: v1.WrittenAt, InstanceID: v1.InstanceID, Pid: v1.Pid,
			IntentsGeneration: v1.IntentsGeneration, IntentsCovered: v1.IntentsCovered, Jobs: v1.Jobs}
	case *head.Version == Version && head.InstanceID == nil && head.Records == nil:
		var err error
		if doc, err = importOpenClaw(b); err != nil {
			return nil, err
		}
	case *head.Version == Version:
		doc = &File{}
		if err := decodeStrict(b, doc); err != nil {
			return nil, err
		}
		if len(doc.OpenClaw) == 0 {
			doc.OpenClaw = nil // (none, however written)
		}
	default:
		return nil, fmt.Errorf("unknown journal version %d (this supervisor reads %d and %d)", *head.Version, versionRecordsOnly, Version)
	}
	// An invalid record is left out, not the journal: the other jobs'
	// fates and orphans are still known.
	seen := map[string]bool{}
	kept := doc.Jobs[:0]
	for i, r := range doc.Jobs {
		why := ""
		switch {
		case r.JobID == "":
			why = fmt.Sprintf("record %d has no jobId", i)
		case seen[r.JobID]:
			why = fmt.Sprintf("job %.128q recorded twice (the first is kept)", r.JobID)
		default:
			why = checkRecord(&r)
		}
		if why != "" {
			doc.Dropped = append(doc.Dropped, why)
			continue
		}
		seen[r.JobID] = true
		kept = append(kept, r)
	}
	doc.Jobs = kept
	return doc, nil
}

// decodeStrict decodes the document b into v: no field v does not have,
// nothing but whitespace after it.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not a journal: %w", err)
	}
	// (dec.More would miss a stray '}' or ']')
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the journal document")
	}
	return nil
}

// importOpenClaw reads a journal of OpenClaw's Node exec supervisor, for
// a supervisor that takes its place on its journal: each job it recorded
// (the jobs it had not seen end) becomes a finished record, its process
// gone from our view, as the Node supervisor itself reports such jobs
// after a restart (failed; here with reason supervisor-restart). Their
// processes are not adopted or signalled: nothing proves which they are.
// Fields this reader does not know are ignored (the file is not ours).
func importOpenClaw(b []byte) (*File, error) {
	var oc struct {
		UpdatedAtMs int64 `json:"updatedAtMs"`
		Jobs        []struct {
			JobID       string `json:"jobId"`
			Command     string `json:"command"`
			Cwd         string `json:"cwd"`
			StartedAtMs int64  `json:"startedAtMs"`
			State       string `json:"state"`
			LastSeq     int64  `json:"lastSeq"`
			Pid         int    `json:"pid"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(b, &oc); err != nil {
		return nil, fmt.Errorf("not a journal: %w", err)
	}
	now := time.Now().UnixMilli()
	doc := &File{Version: Version, WrittenAt: oc.UpdatedAtMs}
	for i, j := range oc.Jobs {
		switch j.State {
		case "pending", "running", "exiting":
		default:
			continue // (ended: the Node supervisor forgets those too)
		}
		if len(j.JobID) > protocol.MaxIDBytes || j.Pid < 0 || j.LastSeq < -1 || j.LastSeq > 1<<60 {
			doc.Dropped = append(doc.Dropped, fmt.Sprintf("OpenClaw job %d (%.64q) is implausible", i, j.JobID))
			continue
		}
		doc.Jobs = append(doc.Jobs, Record{
			JobID: j.JobID, Argv: []string{"/bin/bash", "-c", j.Command}, Cwd: j.Cwd, Pid: j.Pid,
			State: "exited", CreatedAt: j.StartedAtMs, StartedAt: j.StartedAtMs, UpdatedAt: now, EndedAt: now,
			Reason: protocol.ReasonSupervisorRestart, LastSeq: uint64(j.LastSeq + 1),
			Error: "recorded not ended by OpenClaw's Node exec supervisor, whose journal this supervisor took over; its process was not adopted",
		})
		doc.Imported++
	}
	return doc, nil
}

// encodeOpen writes the start of a document to b: everything up to the
// opening bracket of its records.
func encodeOpen(b *bytes.Buffer, hdr *File, openclaw []byte) {
	str := func(s string) { e, _ := json.Marshal(s); b.Write(e) }
	fmt.Fprintf(b, `{"version":%d,"updatedAtMs":%d,"jobs":`, Version, hdr.WrittenAt)
	b.Write(openclaw)
	b.WriteString(`,"instanceId":`)
	str(hdr.InstanceID)
	fmt.Fprintf(b, `,"pid":%d,`, hdr.Pid)
	if hdr.IntentsGeneration != "" {
		b.WriteString(`"intentsGeneration":`)
		str(hdr.IntentsGeneration)
		fmt.Fprintf(b, `,"intentsCovered":%d,`, hdr.IntentsCovered)
	}
	b.WriteString(`"records":[`)
}

// encodeOpenClaw is the OpenClaw view's JSON (nil: none, []).
func encodeOpenClaw(jobs []OpenClawJob) ([]byte, error) {
	if jobs == nil {
		jobs = []OpenClawJob{}
	}
	return json.Marshal(jobs)
}
