// Command riverinterop drives real River (github.com/riverqueue/river) against a database
// that riverboat shares, for riverboat's interop tests (tests/interop). Each subcommand
// reads its options from flags (and a JSON request on stdin where it takes one) and writes
// JSON on stdout: one document for one-shot commands, one JSON object per line for the
// long-running ones (work, ui).
//
//	riverinterop migrate  --db URL [--schema S] --action list|up|down|validate [--target-version N] [--max-steps N]
//	riverinterop insert   --db URL [--schema S] < request.json
//	riverinterop job      --db URL [--schema S] --action get|cancel|retry|delete --id N
//	riverinterop work     --db URL [--schema S] --queues a,b [--kinds k1,k2] [--id ID] [--periodic-kind K ...]
//	riverinterop ui       --db URL [--schema S] [--listen 127.0.0.1:0]
//
// The database URL is postgres://... (pgx v5) or sqlite:///path (database/sql with
// modernc.org/sqlite, WAL and a busy timeout like riverboat's SQLite driver).
package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	_ "modernc.org/sqlite"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: riverinterop migrate|insert|job|work|ui [flags]"))
	}
	cmd, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	common := commonFlags{}
	fs.StringVar(&common.db, "db", "", "database URL: postgres://... or sqlite:///path")
	fs.StringVar(&common.schema, "schema", "", "Postgres schema of River's tables")
	var run func(ctx context.Context, db *database) error
	switch cmd {
	case "migrate":
		run = migrateCommand(fs)
	case "insert":
		run = insertCommand(fs)
	case "job":
		run = jobCommand(fs)
	case "work":
		run = workCommand(fs)
	case "ui":
		run = uiCommand(fs)
	default:
		fail(fmt.Errorf("unknown command %q", cmd))
	}
	if err := fs.Parse(args); err != nil {
		fail(err)
	}
	ctx := context.Background()
	db, err := openDatabase(ctx, common)
	if err != nil {
		fail(err)
	}
	defer db.close()
	if err := run(ctx, db); err != nil {
		fail(err)
	}
}

type commonFlags struct {
	db     string
	schema string
}

// database is one open database with the River driver for it. River's API is generic
// over the driver's transaction type, so the commands are written once as generic
// functions and called through withDriver.
type database struct {
	url    string
	schema string
	pgPool *pgxpool.Pool
	sqlDB  *sql.DB
}

func openDatabase(ctx context.Context, flags commonFlags) (*database, error) {
	switch {
	case strings.HasPrefix(flags.db, "postgres://"), strings.HasPrefix(flags.db, "postgresql://"):
		pool, err := pgxpool.New(ctx, flags.db)
		if err != nil {
			return nil, err
		}
		return &database{url: flags.db, schema: flags.schema, pgPool: pool}, nil
	case strings.HasPrefix(flags.db, "sqlite://"):
		// riverboat's form: sqlite:///relative/path or sqlite:////absolute/path.
		path, _, _ := strings.Cut(strings.TrimPrefix(flags.db, "sqlite:///"), "?")
		dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, err
		}
		// River's SQLite driver asks for one connection: SQLite has one writer at a time.
		db.SetMaxOpenConns(1)
		return &database{url: flags.db, pgPool: nil, sqlDB: db}, nil
	default:
		return nil, fmt.Errorf("unsupported database URL %q", flags.db)
	}
}

func (db *database) close() {
	if db.pgPool != nil {
		db.pgPool.Close()
	}
	if db.sqlDB != nil {
		_ = db.sqlDB.Close()
	}
}

// txRunner begins a transaction of the driver's type; commit or roll it back with the
// returned function.
type txRunner[TTx any] func(ctx context.Context) (TTx, func(commit bool) error, error)

// env bundles what every command needs for one driver.
type env[TTx any] struct {
	db     *database
	driver riverdriver.Driver[TTx]
	begin  txRunner[TTx]
}

// withDriver calls one of the generic command bodies with the database's driver.
func withDriver(db *database, pg func(env[pgx.Tx]) error, lite func(env[*sql.Tx]) error) error {
	if db.pgPool != nil {
		begin := func(ctx context.Context) (pgx.Tx, func(bool) error, error) {
			tx, err := db.pgPool.Begin(ctx)
			if err != nil {
				return nil, nil, err
			}
			return tx, func(commit bool) error {
				if commit {
					return tx.Commit(ctx)
				}
				return tx.Rollback(ctx)
			}, nil
		}
		return pg(env[pgx.Tx]{db: db, driver: riverpgxv5.New(db.pgPool), begin: begin})
	}
	begin := func(ctx context.Context) (*sql.Tx, func(bool) error, error) {
		tx, err := db.sqlDB.BeginTx(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		return tx, func(commit bool) error {
			if commit {
				return tx.Commit()
			}
			return tx.Rollback()
		}, nil
	}
	return lite(env[*sql.Tx]{db: db, driver: riversqlite.New(db.sqlDB), begin: begin})
}

var stdoutMu sync.Mutex

// emit writes one JSON document (one line) on stdout.
func emit(v any) {
	// No HTML escaping, so args show the bytes River stored.
	var buf bytes.Buffer
	encoder := json.NewEncoder(&buf)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(v); err != nil {
		fail(err)
	}
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	os.Stdout.Write(buf.Bytes())
}

func fail(err error) {
	data, _ := json.Marshal(map[string]string{"error": err.Error()})
	fmt.Fprintln(os.Stderr, string(data))
	os.Exit(1)
}
