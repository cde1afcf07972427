package sqlite

import (
	"context"
	"database/sql"

	"go.uber.org/zap"
)

// checkpointPages is how many pages the writer's commits write to the WAL
// between two checkpoints: SQLite's own default (wal_autocheckpoint).
const checkpointPages = 1000

// checkpointer copies the WAL back into the database file on a goroutine
// and a connection of its own. SQLite would otherwise do it inside the
// commit that crosses wal_autocheckpoint, on the writer's goroutine, which
// would hold every write waiting behind the copy of a thousand pages and an
// fsync of the database file. The writer's connection has automatic
// checkpoints off; after each checkpointPages pages it has written, the
// writer kicks the checkpointer, which runs a PASSIVE checkpoint: it never
// waits for a lock and never blocks the writer or a reader, and it copies
// what no reader still needs (a frame a reader holds is copied by a later
// checkpoint). Once a checkpoint has copied the whole WAL, the writer's
// next transaction starts the WAL over from its beginning, as it would
// after an automatic checkpoint.
//
// Durability does not depend on it: a commit is durable once its WAL
// frames are synced, before any checkpoint.
type checkpointer struct {
	db   *sql.DB
	log  *zap.Logger
	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	pages int64 // written since the last kick; the writer goroutine's only
}

func startCheckpointer(db *sql.DB, log *zap.Logger) *checkpointer {
	c := &checkpointer{db: db, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	// A first checkpoint copies what the last run or a migration left in
	// the WAL.
	c.kick <- struct{}{}
	go c.run()
	return c
}

func (c *checkpointer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.kick:
			var busy, frames, copied int64
			if err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err != nil {
				c.log.Warn("sqlite checkpoint failed", zap.Error(err))
			}
		case <-c.stop:
			return
		}
	}
}

// wrote counts pages a commit wrote and kicks a checkpoint after each
// checkpointPages of them, without waiting (a kick already pending
// covers them). The writer goroutine calls it.
func (c *checkpointer) wrote(pages int64) {
	if c.pages += pages; c.pages < checkpointPages {
		return
	}
	c.pages = 0
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// close stops the checkpointer and closes its connection.
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
