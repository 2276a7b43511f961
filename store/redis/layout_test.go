//go:build integration

package redis_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testing/redistest"
	"github.com/sluice-go/sluice/store/redis"
)

// layoutReadme is the specification of the scripts' state, whose tables
// TestLayoutReadme checks.
const layoutReadme = "lua/README.md"

// TestLayoutReadme holds lua/README.md to what the scripts do: for each
// row of its "State layouts" table, the test makes the decision the row
// states, at the table's instant, on a real server, and compares the key,
// its Redis type, encoding, value and TTL with the row; the store's own
// keys have the types the README states, and the table of files names
// every file of lua/.
func TestLayoutReadme(t *testing.T) {
	doc, err := os.ReadFile(layoutReadme)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	srv := redistest.Start(t)
	store := redis.FromRueidis(newRueidis(t, srv.Addr))
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 15, 0, time.UTC)
	if !strings.Contains(text, now.Format(time.RFC3339)) || !strings.Contains(text, strconv.FormatInt(now.UnixMicro(), 10)+" µs") {
		t.Fatalf("%s: the state layouts are no longer stated at %s (%d µs): change the test's instant with the table", layoutReadme, now.Format(time.RFC3339), now.UnixMicro())
	}
	rows := table(t, text, "algorithm", "limit", "period", "cost", "key", "type", "encoding", "value", "TTL (ms)")
	if len(rows) != len(sluice.Algorithms)+1 {
		t.Errorf("%s: %d rows of state layouts, want one per algorithm and concurrency (%d)", layoutReadme, len(rows), len(sluice.Algorithms)+1)
	}
	for _, row := range rows {
		t.Run(row["algorithm"], func(t *testing.T) {
			l, cost := rowLimit(t, row)
			key := store.Key("client-123", l)
			if key != row["key"] {
				t.Errorf("key %s, the README says %s", key, row["key"])
			}
			req := sluice.Request{Parts: []sluice.Part{{Key: "client-123", Limits: []sluice.Limit{l}, Cost: cost}}, Now: now, Slot: "slot-1"}
			rs, err := store.Take(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !rs[0].Allowed {
				t.Fatalf("the decision was denied: %+v", rs[0])
			}
			checkKey(t, srv, key, row)
		})
	}
	if err := store.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Heartbeat(ctx, "replica-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, row := range table(t, text, "key", "written by", "type", "holds") {
		key := strings.ReplaceAll(row["key"], "<prefix>", "sluice")
		if typ := srv.Do(t, "TYPE", key); typ != row["type"] {
			t.Errorf("TYPE %s = %v after Ready and Heartbeat, the README says %s", key, typ, row["type"])
		}
	}
	files, err := filepath.Glob("lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, row := range table(t, text, "file", "kind", "role") {
		named = append(named, "lua/"+row["file"])
	}
	slices.Sort(named)
	if !slices.Equal(files, named) {
		t.Errorf("%s names the files %q; lua/ holds %q", layoutReadme, named, files)
	}
}

// rowLimit returns the limit and cost a row of the layouts states.
func rowLimit(t *testing.T, row map[string]string) (sluice.Limit, int) {
	t.Helper()
	alg, err := sluice.ParseAlgorithm(row["algorithm"])
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(row["limit"])
	if err != nil {
		t.Fatalf("limit: %v", err)
	}
	period, err := time.ParseDuration(row["period"])
	if err != nil {
		t.Fatalf("period: %v", err)
	}
	cost, err := strconv.Atoi(row["cost"])
	if err != nil {
		t.Fatalf("cost: %v", err)
	}
	return sluice.Limit{Algorithm: alg, Limit: n, Period: period}, cost
}

// checkKey compares what the server holds at key with a row's type,
// encoding, value and TTL.
func checkKey(t *testing.T, srv *redistest.Server, key string, row map[string]string) {
	t.Helper()
	typ := srv.Do(t, "TYPE", key)
	if typ != row["type"] {
		t.Errorf("TYPE %s = %v, the README says %s", key, typ, row["type"])
	}
	enc := srv.Do(t, "OBJECT", "ENCODING", key)
	if enc == "ziplist" {
		enc = "listpack" // its name before Redis 7
	}
	if enc != row["encoding"] {
		t.Errorf("OBJECT ENCODING %s = %v, the README says %s", key, enc, row["encoding"])
	}
	var value string
	switch typ {
	case "string":
		value, _ = srv.Do(t, "GET", key).(string)
	case "zset":
		reply, _ := srv.Do(t, "ZRANGE", key, "0", "-1", "WITHSCORES").([]any)
		var members []string
		for i := 0; i+1 < len(reply); i += 2 {
			members = append(members, fmt.Sprintf("%v=%v", reply[i], reply[i+1]))
		}
		value = strings.Join(members, ", ")
	}
	if value != row["value"] {
		t.Errorf("%s holds %s, the README says %s", key, value, row["value"])
	}
	want, err := strconv.ParseInt(row["TTL (ms)"], 10, 64)
	if err != nil {
		t.Fatalf("TTL: %v", err)
	}
	// PTTL counts down from the TTL the script set: allow the test's own
	// time since, on a shared machine.
	if pttl, _ := srv.Do(t, "PTTL", key).(int64); pttl > want || pttl < want-3000 {
		t.Errorf("PTTL %s = %d ms, the README says %d", key, pttl, want)
	}
}

// table returns the rows of the Markdown table of text whose header is
// columns, each cell by its column's name, without the backquotes of a
// code span.
func table(t *testing.T, text string, columns ...string) []map[string]string {
	t.Helper()
	var rows []map[string]string
	in := false
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if in {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		switch {
		case !in:
			in = slices.Equal(cells, columns)
		case strings.HasPrefix(cells[0], "---"):
		case len(cells) != len(columns):
			t.Fatalf("%s: a row of %d cells in the table of %q: %s", layoutReadme, len(cells), columns, line)
		default:
			row := map[string]string{}
			for i, c := range columns {
				row[c] = cells[i]
			}
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no table of the columns %q", layoutReadme, columns)
	}
	return rows
}
