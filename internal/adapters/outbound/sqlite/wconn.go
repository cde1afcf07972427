package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	msqlite "modernc.org/sqlite"
)

// wconn is the writer's connection, used below database/sql.
//
// Through database/sql each statement of a group cost the single writer
// more than a small statement costs SQLite: Tx.StmtContext made a new
// *sql.Stmt for every exec, every exec converted its arguments (by
// reflection, for an int) into a fresh []driver.NamedValue, took the
// connection's lock and wrapped the result, and BEGIN and COMMIT were
// parsed anew for every group. The writer goroutine is the only user of its
// connection, so it holds one sql.Conn for the store's life and runs each
// group inside one Conn.Raw: BEGIN IMMEDIATE, the group's statements and
// COMMIT go straight to the driver's connection, each statement prepared on
// it once (at Open) with an argument slice it reuses.
//
// A wconn is used by one goroutine at a time: Open, then the writer
// goroutine, then Close once the writer has stopped.
type wconn struct {
	conn *sql.Conn
	dc   driver.Conn // the driver's connection the statements were prepared on
	all  []*wstmt    // every statement prepared, to close them

	begin, commit, rollback *wstmt

	// pages counts the database pages the connection's commits wrote to
	// the WAL (SQLite's cache-write counter), for Stats.
	pages atomic.Int64
}

// wstmt is a statement prepared on the writer's driver connection.
type wstmt struct {
	query string
	ds    interface {
		driver.StmtExecContext
		driver.StmtQueryContext
		Close() error
	}
	args []driver.NamedValue // reused by every exec and query: one goroutine uses it
}

// openWconn takes db's connection for the writer (db holds one) and
// prepares BEGIN, COMMIT and ROLLBACK on it; prepare adds the store's
// statements.
func openWconn(ctx context.Context, db *sql.DB) (*wconn, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("take the writer's connection: %w", err)
	}
	w := &wconn{conn: conn}
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(driver.Conn)
		if !ok {
			return fmt.Errorf("sqlite driver connection is a %T", dc)
		}
		w.dc = c
		return nil
	})
	if err == nil {
		w.begin, err = w.prepare(ctx, "BEGIN IMMEDIATE")
	}
	if err == nil {
		w.commit, err = w.prepare(ctx, "COMMIT")
	}
	if err == nil {
		w.rollback, err = w.prepare(ctx, "ROLLBACK")
	}
	if err != nil {
		return nil, errors.Join(err, w.close())
	}
	return w, nil
}

// prepare prepares query on the writer's connection.
func (w *wconn) prepare(ctx context.Context, query string) (*wstmt, error) {
	st := &wstmt{query: query}
	err := w.raw(func(c driver.Conn) error {
		pc, ok := c.(driver.ConnPrepareContext)
		if !ok {
			return fmt.Errorf("sqlite driver connection %T cannot prepare with a context", c)
		}
		ds, err := pc.PrepareContext(ctx, query)
		if err != nil {
			return err
		}
		x, ok := ds.(interface {
			driver.StmtExecContext
			driver.StmtQueryContext
			Close() error
		})
		if !ok {
			_ = ds.Close()
			return fmt.Errorf("sqlite driver statement %T lacks ExecContext or QueryContext", ds)
		}
		st.ds = x
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("prepare %q: %w", query, err)
	}
	w.all = append(w.all, st)
	return st, nil
}

// raw runs f with the driver's connection, inside Conn.Raw as database/sql
// requires. f's error is handed back outside Raw, so that no error of a
// statement (which is never driver.ErrBadConn) can make database/sql drop
// the connection its statements were prepared on.
func (w *wconn) raw(f func(driver.Conn) error) error {
	var ferr error
	err := w.conn.Raw(func(dc any) error {
		if dc != w.dc {
			ferr = errors.New("sqlite: the writer's driver connection changed")
			return nil
		}
		ferr = f(w.dc)
		return nil
	})
	if err != nil {
		return err
	}
	return ferr
}

// tx runs f in one transaction (BEGIN IMMEDIATE ... COMMIT) and commits it
// if f returns nil. If f or the COMMIT fails, the transaction is rolled back
// (SQLite may already have done so: a ROLLBACK that finds no transaction is
// harmless) and the error is returned: the transaction wrote nothing.
func (w *wconn) tx(ctx context.Context, f func() error) error {
	return w.raw(func(driver.Conn) error {
		if _, err := w.exec(ctx, w.begin); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if err := f(); err != nil {
			_, _ = w.exec(ctx, w.rollback)
			return err
		}
		if _, err := w.exec(ctx, w.commit); err != nil {
			_, _ = w.exec(ctx, w.rollback)
			return fmt.Errorf("commit: %w", err)
		}
		if st, ok := w.dc.(msqlite.DBStatus); ok {
			if n, _, err := st.Status(msqlite.DBStatusCacheWrite, true); err == nil {
				w.pages.Add(int64(n))
			}
		}
		return nil
	})
}

// bind sets st's arguments to args, as database/sql's default conversion
// would: the driver takes int64, float64, bool, []byte, string, time.Time
// and nil.
func (st *wstmt) bind(args []any) error {
	st.args = st.args[:0]
	for i, a := range args {
		var v driver.Value
		switch x := a.(type) {
		case int64, string, []byte, nil, bool, float64:
			v = x
		case int:
			v = int64(x)
		default:
			var err error
			if v, err = driver.DefaultParameterConverter.ConvertValue(a); err != nil {
				return fmt.Errorf("argument %d of %q: %w", i+1, st.query, err)
			}
		}
		st.args = append(st.args, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	return nil
}

// add binds v after the arguments bound so far; v is an int64 or a string
// (the driver's own types, so no conversion).
func (st *wstmt) add(v driver.Value) {
	st.args = append(st.args, driver.NamedValue{Ordinal: len(st.args) + 1, Value: v})
}

// unbind drops the references to the arguments, so that a body does not
// stay alive in the statement until its next use.
func (st *wstmt) unbind() {
	clear(st.args)
	st.args = st.args[:0]
}

// exec runs st with args and returns how many rows it changed. Only inside
// raw (tx).
func (w *wconn) exec(ctx context.Context, st *wstmt, args ...any) (int64, error) {
	if err := st.bind(args); err != nil {
		return 0, err
	}
	return w.run(ctx, st)
}

// run runs st with the arguments bound to it (bind, add) and unbinds them.
// Only inside raw (tx).
func (w *wconn) run(ctx context.Context, st *wstmt) (int64, error) {
	res, err := st.ds.ExecContext(ctx, st.args)
	st.unbind()
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// query runs st with args; the caller closes the rows before st runs again.
// Only inside raw (tx).
func (w *wconn) query(ctx context.Context, st *wstmt, args ...any) (*wrows, error) {
	if err := st.bind(args); err != nil {
		return nil, err
	}
	rows, err := st.ds.QueryContext(ctx, st.args)
	st.unbind()
	if err != nil {
		return nil, err
	}
	return &wrows{rows: rows, vals: make([]driver.Value, len(rows.Columns()))}, nil
}

// queryRow is query for one row: Scan reports sql.ErrNoRows when there is
// none, as *sql.Row does.
func (w *wconn) queryRow(ctx context.Context, st *wstmt, args ...any) wrow {
	rows, err := w.query(ctx, st, args...)
	return wrow{rows: rows, err: err}
}

// close closes the statements and gives the connection back to database/sql
// (whose Close then closes it).
func (w *wconn) close() error {
	var errs []error
	if w.dc != nil {
		errs = append(errs, w.raw(func(driver.Conn) error {
			var errs []error
			for _, st := range w.all {
				errs = append(errs, st.ds.Close())
			}
			return errors.Join(errs...)
		}))
	}
	w.all = nil
	return errors.Join(append(errs, w.conn.Close())...)
}

// wrows are the rows of a query on the writer's connection: storekit.Rows,
// scanning the column types this store's schema has (INTEGER, TEXT, BLOB)
// into the Go types its code reads them as.
type wrows struct {
	rows driver.Rows
	vals []driver.Value
	err  error
	done bool
}

// Next moves to the next row; false at the end or on an error (Err).
func (r *wrows) Next() bool {
	if r.done {
		return false
	}
	if err := r.rows.Next(r.vals); err != nil {
		r.done = true
		if !errors.Is(err, io.EOF) {
			r.err = err
		}
		return false
	}
	return true
}

// Err is the error that ended Next, if any.
func (r *wrows) Err() error { return r.err }

// Close closes the rows (resetting the statement for its next use).
func (r *wrows) Close() error {
	r.done = true
	return r.rows.Close()
}

// Scan copies the current row into dest, one pointer a column.
func (r *wrows) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("sqlite: scan of %d columns into %d values", len(r.vals), len(dest))
	}
	for i, d := range dest {
		if err := assign(d, r.vals[i]); err != nil {
			return fmt.Errorf("sqlite: column %d: %w", i, err)
		}
	}
	return nil
}

// assign stores v, a value of the driver, in d. The driver gives INTEGER as
// int64, TEXT as string, BLOB as []byte (its own copy) and NULL as nil.
func assign(d any, v driver.Value) error {
	switch d := d.(type) {
	case *int64:
		if x, ok := v.(int64); ok {
			*d = x
			return nil
		}
	case *int:
		if x, ok := v.(int64); ok {
			*d = int(x)
			return nil
		}
	case *bool:
		if x, ok := v.(int64); ok {
			*d = x != 0
			return nil
		}
	case *string:
		switch x := v.(type) {
		case string:
			*d = x
			return nil
		case []byte:
			*d = string(x)
			return nil
		}
	case *[]byte:
		switch x := v.(type) {
		case nil:
			*d = nil
			return nil
		case []byte:
			*d = x
			return nil
		case string:
			*d = []byte(x)
			return nil
		}
	}
	return fmt.Errorf("cannot scan %T into %T", v, d)
}

// wrow is the one row of queryRow.
type wrow struct {
	rows *wrows
	err  error
}

// Scan scans the first row into dest and closes the rows; sql.ErrNoRows if
// there is none.
func (r wrow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	return r.rows.Scan(dest...)
}
