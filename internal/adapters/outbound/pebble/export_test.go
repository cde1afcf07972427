package pebble

import "github.com/cockroachdb/pebble/v2"

// WrittenBytes flushes the store's memtable and returns how many bytes
// Pebble has written to the WAL and to tables and blob files (flushes and
// compactions) since it was opened: the benchmarks' bytes per op.
func WrittenBytes(s *Store) (wal, tables uint64, err error) {
	err = s.read(func() error {
		if err := s.db.Flush(); err != nil {
			return err
		}
		m := s.db.Metrics()
		wal, tables = m.WAL.BytesWritten, filesWritten(m)
		return nil
	})
	return wal, tables, err
}

// filesWritten is how many bytes m's flushes and compactions wrote to
// tables and blob files. Not m.Total(), which counts the WAL's bytes in as
// flushed too; and a flush's blob bytes are counted once, though Pebble
// adds them to the level's compacted bytes as well as its flushed ones.
func filesWritten(m *pebble.Metrics) uint64 {
	var n uint64
	for _, l := range m.Levels {
		n += l.TableBytesFlushed + l.TableBytesCompacted + l.BlobBytesCompacted
	}
	return n
}
