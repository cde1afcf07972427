package pebble

import (
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// migrate brings a layout 2 store to layout 3 before the writer starts: it
// builds the x/ and i/ entries and the c/ counts from the records, then
// sets m/format. Records stay as they are (version 1 reads as a job with no
// history). The chunks commit without a sync and the last one, which holds
// the counts and the new format, with one: a crash part way leaves format
// 2, and the next open starts over, first dropping whatever an earlier run
// (or an older build writing since) left under x/, i/ and c/.
func (s *Store) migrate() error {
	start := time.Now()
	db := s.db
	clear := db.NewBatch()
	for _, p := range [][]byte{prefixStatus, prefixIndex, prefixCount} {
		if err := clear.DeleteRange(p, prefixEnd(p), nil); err != nil {
			return err
		}
	}
	if err := clear.Commit(pebble.NoSync); err != nil {
		return err
	}
	_ = clear.Close()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefixJob, UpperBound: prefixEnd(prefixJob)})
	if err != nil {
		return err
	}
	defer it.Close()
	w := &wbatch{b: db.NewBatch(), s: s, counts: map[counter]int64{}}
	done, skipped := 0, 0
	for ok := it.First(); ok; ok = it.Next() {
		j, err := decodeMeta(it.Value())
		if err != nil {
			// Unreadable already (Get fails on it); it is left out of the
			// indexes rather than keeping the whole store from opening.
			s.log.Warn("pebble migration: skipping a corrupt job record", zap.ByteString("key", it.Key()), zap.Error(err))
			skipped++
			continue
		}
		w.putIndexes(nil, j)
		if done++; done%s.opts.migrateChunk == 0 {
			if err := s.commitChunk(w, done); err != nil {
				return err
			}
			w.b = db.NewBatch()
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	for c, n := range w.counts {
		if n != 0 {
			w.set(countKey(nil, c.dim, c.value, c.st), countValue(n))
		}
	}
	w.set(keyFormat, []byte{layoutVersionV3})
	if w.err != nil {
		return w.err
	}
	if err := w.b.Commit(pebble.Sync); err != nil {
		return err
	}
	_ = w.b.Close()
	s.log.Info("pebble store migrated to layout 3 (layout 4 next)", zap.Int("jobs", done), zap.Int("skipped", skipped),
		zap.Duration("took", time.Since(start)))
	return nil
}

// commitChunk commits one chunk of a migration, done records in.
func (s *Store) commitChunk(w *wbatch, done int) error {
	if w.err != nil {
		return w.err
	}
	if err := w.b.Commit(pebble.NoSync); err != nil {
		return err
	}
	_ = w.b.Close()
	if h := s.opts.migrateHook; h != nil {
		if err := h(done); err != nil {
			return fmt.Errorf("after %d jobs: %w", done, err)
		}
	}
	return nil
}

// migrate3 brings a layout 3 store to layout 4 before the writer starts:
// each ready-index key gains the priority code after its lane (normal: no
// job of layout 3 has another priority), and m/format becomes 4. The s/
// and d/ indexes start empty, as no job of layout 3 is scheduled or has a
// deadline; records stay as they are (version 1 and 2 records read as jobs
// without options). The chunks commit without a sync and the last one,
// which sets the format, with one. A crash part way leaves format 3 with
// some keys converted; the next open converts the rest, telling the two
// forms apart by what follows the lane (8 bytes in layout 3, 9 in 4).
func (s *Store) migrate3() error {
	start := time.Now()
	db := s.db
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefixReady, UpperBound: prefixEnd(prefixReady)})
	if err != nil {
		return err
	}
	defer it.Close()
	w := &wbatch{b: db.NewBatch(), s: s}
	done, skipped := 0, 0
	normal := priorityCode(domain.PriorityNormal)
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		n, lane, valid := readyLane(k)
		switch {
		case valid && uint64(len(k)-lane) == n+9:
			continue // converted by an earlier run
		case !valid || uint64(len(k)-lane) != n+8:
			// Unreadable already (ListReady skips it); left alone rather
			// than keeping the whole store from opening.
			s.log.Warn("pebble migration: skipping a corrupt ready-index key", zap.ByteString("key", k))
			skipped++
			continue
		}
		end := lane + int(n)
		nk := append(append(append(make([]byte, 0, len(k)+1), k[:end]...), normal), k[end:]...)
		w.del(k)
		w.set(nk, it.Value())
		if done++; done%s.opts.migrateChunk == 0 {
			if err := s.commitChunk(w, done); err != nil {
				return err
			}
			w.b = db.NewBatch()
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	w.set(keyFormat, []byte{layoutVersionV4})
	if w.err != nil {
		return w.err
	}
	if err := w.b.Commit(pebble.Sync); err != nil {
		return err
	}
	_ = w.b.Close()
	s.log.Info("pebble store migrated to layout 4 (layout 5 next)", zap.Int("ready entries", done), zap.Int("skipped", skipped),
		zap.Duration("took", time.Since(start)))
	return nil
}

// migrate4 brings a layout 4 store to layout 5 before the writer starts:
// the expiry entries of waiting jobs (every job with a ready-index or s/
// entry, whose values hold its expiry and id) move from e/ to w/, and the
// ready-index entries of results waiting for delivery (stDeliver, expired
// ones included, as every counter counts them until they are purged) are
// counted into the deliveries counter. It reads no record. The moves
// commit in chunks without a sync, and the last batch, with the counter
// and m/format 5, with one. A crash part way leaves layout 4 with some
// entries moved; the next open moves them again (deleting an e/ entry
// that is gone and setting a w/ one that is there change nothing) and
// counts afresh: the count is written whole, not added. A layout 5 store is
// then migrated to 6 (migrate5).
func (s *Store) migrate4() error {
	start := time.Now()
	db := s.db
	w := &wbatch{b: db.NewBatch(), s: s}
	var moved int
	var delivering int64
	for _, prefix := range [][]byte{prefixReady, prefixSched} {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			var exp int64
			var id []byte
			var valid bool
			if prefix[0] == prefixReady[0] {
				var state byte
				state, exp, id, valid = parseReady(it.Value())
				if valid && state == stDeliver {
					delivering++
				}
			} else {
				exp, id, valid = parseSched(it.Value())
			}
			if !valid {
				// Unreadable already (ListReady and PromoteDue skip or
				// refuse it); left alone rather than keeping the store shut.
				s.log.Warn("pebble migration: skipping a corrupt index entry", zap.ByteString("key", it.Key()))
				continue
			}
			if exp == 0 {
				continue
			}
			w.del(expiryKey(s.kbuf[:0], exp, domain.JobID(id)))
			w.set(expiryKeyIn(s.kbuf[:0], prefixWait, exp, domain.JobID(id)), nil)
			if moved++; moved%s.opts.migrateChunk == 0 {
				if err := s.commitChunk(w, moved); err != nil {
					return errors.Join(err, it.Close())
				}
				w.b = db.NewBatch()
			}
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return err
		}
	}
	k := countKey(nil, deliveries.dim, deliveries.value, deliveries.st)
	if delivering == 0 {
		w.del(k)
	} else {
		w.set(k, countValue(delivering))
	}
	w.set(keyFormat, []byte{layoutVersionV5})
	if w.err != nil {
		return w.err
	}
	if err := w.b.Commit(pebble.Sync); err != nil {
		return err
	}
	_ = w.b.Close()
	s.log.Info("pebble store migrated to layout 5 (layout 6 next)", zap.Int("expiry entries moved", moved), zap.Int64("deliveries", delivering),
		zap.Duration("took", time.Since(start)))
	return nil
}

// migrate5 brings a layout 5 store to layout 6 before the writer starts:
// m/format becomes 6, in one synced write, and nothing else changes.
// Layout 6 adds version 4 records, whose long request bodies are under b/
// (a layout 5 build, which the format now refuses, would fail on every such
// record); the version 3 records already stored keep their bodies inline
// and are read as they are until a write rewrites them as version 4. A
// crash before the write leaves layout 5, and the next open migrates it
// again.
func (s *Store) migrate5() error {
	if err := s.db.Set(keyFormat, []byte{layoutVersion}, pebble.Sync); err != nil {
		return err
	}
	s.log.Info("pebble store migrated to layout 6")
	return nil
}
