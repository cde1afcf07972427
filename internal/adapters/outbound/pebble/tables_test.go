package pebble

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

func TestPrefixSpans(t *testing.T) {
	for _, c := range []struct {
		start, end string
	}{
		{"j/01abc", "j0"},
		{"x/q\xff\xff", "x0"},
		{"k/", "k0"},
		{"m/seq", "m0"},
		{"b/01abc", "b0"},
		{"j", ""},  // no prefix: the span runs to the end
		{"zz", ""}, // not one of ours
		{"", ""},
	} {
		p, end, err := prefixSpans([]byte(c.start))
		if err != nil || string(end) != c.end {
			t.Errorf("prefixSpans(%q) = %q, %v; want %q", c.start, end, err, c.end)
		}
		// Only request bodies may go to blob files (bodySeparation).
		want := pebble.ValueStorageLowReadLatency
		if strings.HasPrefix(c.start, "b/") {
			want = pebble.ValueStorageDefault
		}
		if p.ValueStoragePolicy != want {
			t.Errorf("prefixSpans(%q): value storage %d, want %d", c.start, p.ValueStoragePolicy, want)
		}
	}
}

// TestTablesHoldOnePrefixEach checks that flushes and compactions end their
// tables at key prefixes. A table spanning two prefixes covers every key
// between its ends: a queue's new entries and its oldest ones (the head a
// slow destination drains) would put the whole backlog under one table,
// and every compaction of it would rewrite the backlog.
func TestTablesHoldOnePrefixEach(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	now := time.Now()
	ids := domain.NewIDGenerator(nil)
	body := strings.Repeat("b", 200) // long enough for b/
	for i := range 300 {
		j := domain.NewJob(ids.New(), &domain.JobRequest{UserID: "u", IdempotentKey: fmt.Sprint("k", i),
			URL: "http://a.test/x", Method: "POST", Body: body, WebhookURL: "http://h.test/"}, "a.test:80", now)
		if _, _, err := s.Insert(ctx, j); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Attempts: 1,
				Now: now, DeliverIn: "h.test:80"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(when string) {
		t.Helper()
		levels, err := s.db.SSTables()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		prefixes := map[string]bool{}
		for l, tables := range levels {
			for _, tb := range tables {
				n++
				lo, hi := tb.Smallest.UserKey, tb.Largest.UserKey
				if len(lo) < 2 || len(hi) < 2 || !bytes.Equal(lo[:2], hi[:2]) {
					t.Errorf("%s: L%d table %s holds %q to %q", when, l, tb.FileNum, lo, hi)
					continue
				}
				prefixes[string(lo[:2])] = true
			}
		}
		// b/, c/, e/ or w/, i/, j/, k/, m/, r/, x/ at least.
		if len(prefixes) < 8 {
			t.Fatalf("%s: %d tables with prefixes %v; the test wrote too little to check", when, n, prefixes)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	check("after a flush")
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	check("after a compaction")
}

// TestFlushesSplitAroundWhatTheyWouldRewrite checks the other half: a
// flush holding keys at both ends of a prefix whose middle is in the base
// level — a queue's newest entries and the head a slow destination drains
// — writes them to separate tables, so that neither compaction rewrites
// the middle.
func TestFlushesSplitAroundWhatTheyWouldRewrite(t *testing.T) {
	s := openTemp(t)
	db := s.db
	rng := rand.New(rand.NewPCG(1, 2))
	value := func() []byte { // incompressible, so the middle is as large on disk
		v := make([]byte, 1024)
		for i := 0; i < len(v); i += 8 {
			binary.LittleEndian.PutUint64(v[i:], rng.Uint64())
		}
		return v
	}
	key := func(i int) []byte { return fmt.Appendf(nil, "r/%08d", i) }
	const middle = 5000 // 5 MiB, twice what a flushed table may overlap
	for i := 1; i <= middle; i++ {
		if err := db.Set(key(i), value(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(t.Context(), []byte("r/"), []byte("r0"), false); err != nil {
		t.Fatal(err)
	}
	if err := db.Set(key(0), []byte("head"), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Set(key(middle+1), []byte("tail"), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	levels, err := db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	if len(levels[0]) < 2 {
		t.Fatalf("the flush wrote %d tables to L0; want the two ends apart", len(levels[0]))
	}
	for _, tb := range levels[0] {
		lo, hi := string(tb.Smallest.UserKey), string(tb.Largest.UserKey)
		if lo <= string(key(0)) && hi >= string(key(middle+1)) {
			t.Fatalf("L0 table %s spans %q to %q, over the whole middle", tb.FileNum, lo, hi)
		}
	}
}

// openTemp opens a store in a new temporary directory, closed when t ends.
func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestBodiesAreWrittenOnce checks the value separation (bodySeparation): a
// flush writes request bodies to blob files, a compaction moves only their
// references, and every body still reads back whole. Without it, each
// compaction of a queued backlog rewrites its bodies, level after level.
func TestBodiesAreWrittenOnce(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 2000
	var bodyBytes uint64
	jobs := make([]*domain.Job, n)
	for i := range jobs {
		j := storetest.BacklogJob(fmt.Sprint("k", i), rng)
		if i%10 == 0 {
			j.Body = j.Body[:200] // under minSeparatedBody: not counted below
		} else {
			bodyBytes += uint64(len(j.Body))
		}
		jobs[i] = j
	}
	if _, err := s.InsertBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	// The flush may already have been compacted into L6: compactions are
	// counted below, apart from it.
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	var flushBlobs, compactBlobs, compactTables uint64
	for _, l := range s.db.Metrics().Levels {
		// Pebble counts a flush's blob bytes as compacted too.
		flushBlobs += l.BlobBytesFlushed
		compactBlobs += l.BlobBytesCompacted - l.BlobBytesFlushed
		compactTables += l.TableBytesCompacted
	}
	// The bodies are random hex, which compresses to about half.
	if flushBlobs < bodyBytes/3 {
		t.Fatalf("the flush wrote %d bytes of blob files for %d bytes of bodies; want the bodies there", flushBlobs, bodyBytes)
	}
	if compactTables == 0 {
		t.Fatal("nothing was compacted; the test checks nothing")
	}
	if compactBlobs != 0 {
		t.Errorf("compactions rewrote %d bytes of blob files; want the bodies left where the flush put them", compactBlobs)
	}
	if compactTables > bodyBytes/4 {
		t.Errorf("compactions wrote %d bytes of tables for %d bytes of bodies; want only references moved", compactTables, bodyBytes)
	}
	for _, want := range jobs {
		got, err := s.Get(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Body) != string(want.Body) {
			t.Fatalf("job %s: the body read back differs (%d bytes, want %d)", want.ID, len(got.Body), len(want.Body))
		}
	}
}

// TestDeletedBodiesFreeTheirBlobFiles checks the other half of the value
// separation: once every body in a blob file is deleted (here, purged as
// expired) and the deletions are compacted, the file is gone, so a
// finished backlog gives its disk space back.
func TestDeletedBodiesFreeTheirBlobFiles(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(5, 6))
	jobs := make([]*domain.Job, 2000)
	for i := range jobs {
		j := storetest.BacklogJob(fmt.Sprint("k", i), rng)
		j.ExpiresAt = time.Now().Add(-time.Minute)
		jobs[i] = j
	}
	if _, err := s.InsertBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	compactAll := func() {
		t.Helper()
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
			t.Fatal(err)
		}
	}
	compactAll()
	if n := s.db.Metrics().BlobFiles.LiveCount; n == 0 {
		t.Fatal("no blob file after the flush; the test checks nothing")
	}
	purged := 0
	for {
		n, err := s.Purge(ctx, &ports.PurgeParams{Now: time.Now(), Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		purged += n
	}
	if purged != len(jobs) {
		t.Fatalf("purged %d jobs, want %d", purged, len(jobs))
	}
	compactAll()
	if m := s.db.Metrics().BlobFiles; m.LiveCount != 0 {
		t.Fatalf("%d blob files (%d bytes) live after every body was deleted and compacted; want none", m.LiveCount, m.LiveSize)
	}
}

// TestL0IsCompactedAtFourSublevels checks L0's threshold
// (l0CompactionSublevels): three flushes whose keys overlap stay in L0,
// and the fourth makes Pebble compact L0 into the base level. With
// Pebble's default, which compacts at two, the base-level tables at a
// backlog's ends were rewritten twice as often.
func TestL0IsCompactedAtFourSublevels(t *testing.T) {
	s := openTemp(t)
	db := s.db
	flush := func(i int) {
		t.Helper()
		// Both ends of one range: each flush overlaps all the earlier ones.
		for _, k := range []string{"r/head", "r/tail"} {
			if err := db.Set([]byte(k), fmt.Appendf(nil, "%d", i), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// quiet waits until no compaction has been running for half a second.
	quiet := func() *pebble.Metrics {
		t.Helper()
		if _, ok := waitQuiet(s, 500*time.Millisecond, time.Minute); !ok {
			t.Fatal("compactions did not stop within a minute")
		}
		return db.Metrics()
	}
	for i := 1; i < l0CompactionSublevels; i++ {
		flush(i)
	}
	m := quiet()
	if got := m.Levels[0].Sublevels; got != l0CompactionSublevels-1 || m.Compact.Count != 0 {
		t.Fatalf("after %d overlapping flushes: %d L0 sublevels and %d compactions; want %d and none",
			l0CompactionSublevels-1, got, m.Compact.Count, l0CompactionSublevels-1)
	}
	flush(l0CompactionSublevels)
	deadline := time.Now().Add(time.Minute)
	for m = quiet(); m.Compact.Count == 0 || m.Levels[0].Sublevels != 0; m = quiet() {
		if time.Now().After(deadline) {
			t.Fatalf("after %d overlapping flushes: %d L0 sublevels and %d compactions; want L0 compacted",
				l0CompactionSublevels, m.Levels[0].Sublevels, m.Compact.Count)
		}
	}
	for _, k := range []string{"r/head", "r/tail"} {
		v, closer, err := db.Get([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if string(v) != fmt.Sprint(l0CompactionSublevels) {
			t.Errorf("%s = %q after the compaction, want the last flush's %d", k, v, l0CompactionSublevels)
		}
		closer.Close()
	}
}
