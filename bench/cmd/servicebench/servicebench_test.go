package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestCategory: functions are sorted by where their time goes.
func TestCategory(t *testing.T) {
	for fn, want := range map[string]string{
		"github.com/sluice-go/sluice/envoy.(*Service).ShouldRateLimit": "sluice",
		"main.(*listenFlags).grpcServer.func1":                         "sluice",
		"github.com/redis/rueidis.(*pipe).Do":                          "Redis client (rueidis)",
		"google.golang.org/grpc.(*Server).processRPC":                  "gRPC and HTTP/2",
		"golang.org/x/net/http2/hpack.(*Decoder).Write":                "gRPC and HTTP/2",
		"internal/runtime/syscall/linux.Syscall6":                      "syscalls (network I/O)",
		"runtime.mallocgc":                                             "GC and allocation",
		"runtime.copystack":                                            "Go scheduler and runtime",
		"internal/runtime/maps.ctrlGroup.matchH2":                      "Go scheduler and runtime",
		"aeshashbody":                  "Go scheduler and runtime",
		"context.WithValue":            "Go library (context, time, sync, reflect...)",
		"net/textproto.readMIMEHeader": "net/http",
		"encoding/json.Marshal":        "JSON",
		"github.com/other/thing.F":     "other",
	} {
		if got := category(fn); got != want {
			t.Errorf("category(%s) = %q, want %q", fn, got, want)
		}
	}
}

// TestGubernatorMessages: the request is a GetRateLimitsReq of one
// RateLimitReq with the fields given, and answers decode to under the
// limit, over it, or the error a response carries.
func TestGubernatorMessages(t *testing.T) {
	req := gubernatorRequest("bench", "10.0.0.1", 1000, time.Second)
	num, typ, n := protowire.ConsumeTag(req)
	inner, m := protowire.ConsumeBytes(req[n:])
	if num != 1 || typ != protowire.BytesType || m < 0 || n+m != len(req) {
		t.Fatalf("request: field %d type %d, %d of %d bytes", num, typ, n+m, len(req))
	}
	fields := map[protowire.Number]any{}
	for len(inner) > 0 {
		num, typ, n := protowire.ConsumeTag(inner)
		inner = inner[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeString(inner)
			fields[num], inner = v, inner[n:]
		} else {
			v, n := protowire.ConsumeVarint(inner)
			fields[num], inner = v, inner[n:]
		}
	}
	if fields[1] != "bench" || fields[2] != "10.0.0.1" || fields[3] != uint64(1) || fields[4] != uint64(1000) || fields[5] != uint64(1000) {
		t.Errorf("RateLimitReq fields %v", fields)
	}
	resp := func(status uint64, msg string) []byte {
		var r []byte
		r = protowire.AppendTag(r, 1, protowire.VarintType)
		r = protowire.AppendVarint(r, status)
		r = protowire.AppendTag(r, 2, protowire.VarintType) // limit, skipped
		r = protowire.AppendVarint(r, 1000)
		if msg != "" {
			r = protowire.AppendTag(r, 5, protowire.BytesType)
			r = protowire.AppendString(r, msg)
		}
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		return protowire.AppendBytes(b, r)
	}
	if under, err := gubernatorAnswer(resp(0, "")); !under || err != nil {
		t.Errorf("UNDER_LIMIT: %v, %v", under, err)
	}
	if under, err := gubernatorAnswer(resp(1, "")); under || err != nil {
		t.Errorf("OVER_LIMIT: %v, %v", under, err)
	}
	if _, err := gubernatorAnswer(resp(0, "boom")); err == nil {
		t.Error("an error in the response is not an error")
	}
	if _, err := gubernatorAnswer(nil); err == nil {
		t.Error("an empty GetRateLimitsResp is not an error")
	}
}

// TestCPUSeconds: this process's CPU time is read and grows with work.
func TestCPUSeconds(t *testing.T) {
	before, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for x, deadline := 0, time.Now().Add(50*time.Millisecond); time.Now().Before(deadline); x++ {
		_ = x * x
	}
	after, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before < 0 || after <= before {
		t.Errorf("CPU seconds %v then %v", before, after)
	}
}

// TestShares: a real CPU profile of this process, made while a function
// of a known category burns CPU, is read by go tool pprof into shares
// that add up to 100% and name that category.
func TestShares(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	burnJSON(300 * time.Millisecond)
	pprof.StopCPUProfile()
	f.Close()
	ps, err := shares(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	sum, jsonShare := 0.0, 0.0
	for _, s := range ps.byCategory {
		sum += s.percent
		if s.category == "JSON" {
			jsonShare = s.percent
		}
	}
	if sum < 99.5 || sum > 100.5 || jsonShare < 30 {
		t.Errorf("shares %v: sum %.1f%%, JSON %.1f%%; want 100%% and JSON among them", ps.byCategory, sum, jsonShare)
	}
	if text := sharesText(ps); !strings.Contains(text, "JSON") {
		t.Errorf("sharesText = %q", text)
	}
}

// burnJSON validates JSON (encoding/json's scanner, nothing else) for d.
func burnJSON(d time.Duration) {
	doc := []byte("[" + strings.Repeat(`{"a":[1,2,3],"b":"text","c":{"x":1.5}},`, 2000) + "0]")
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		_ = json.Valid(doc)
	}
}
