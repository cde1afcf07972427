package pebble

// WrittenBytes flushes the store's memtable and returns how many bytes
// Pebble has written to the WAL and to tables (flushes and compactions)
// since it was opened: the benchmarks' bytes per op.
func WrittenBytes(s *Store) (wal, tables uint64, err error) {
	err = s.read(func() error {
		if err := s.db.Flush(); err != nil {
			return err
		}
		m := s.db.Metrics()
		t := m.Total()
		wal, tables = m.WAL.BytesWritten, t.TableBytesFlushed+t.TableBytesCompacted+t.BlobBytesFlushed+t.BlobBytesCompacted
		return nil
	})
	return wal, tables, err
}
