package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// jobJSON is a job row as the tests read it; unique_key is hex so equal bytes compare
// equal as strings.
type jobJSON struct {
	ID           int64                    `json:"id"`
	Kind         string                   `json:"kind"`
	Queue        string                   `json:"queue"`
	State        string                   `json:"state"`
	Attempt      int                      `json:"attempt"`
	MaxAttempts  int                      `json:"max_attempts"`
	Priority     int                      `json:"priority"`
	Args         json.RawMessage          `json:"args"`
	Metadata     json.RawMessage          `json:"metadata"`
	Tags         []string                 `json:"tags"`
	Errors       []rivertype.AttemptError `json:"errors"`
	AttemptedBy  []string                 `json:"attempted_by"`
	ScheduledAt  time.Time                `json:"scheduled_at"`
	FinalizedAt  *time.Time               `json:"finalized_at"`
	UniqueKey    string                   `json:"unique_key"`
	UniqueStates []string                 `json:"unique_states"`
}

func toJSON(job *rivertype.JobRow) *jobJSON {
	if job == nil {
		return nil
	}
	states := make([]string, 0, len(job.UniqueStates))
	for _, s := range job.UniqueStates {
		states = append(states, string(s))
	}
	args := json.RawMessage(job.EncodedArgs)
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	metadata := json.RawMessage(job.Metadata)
	if len(metadata) == 0 {
		metadata = json.RawMessage("null")
	}
	return &jobJSON{
		ID: job.ID, Kind: job.Kind, Queue: job.Queue, State: string(job.State),
		Attempt: job.Attempt, MaxAttempts: job.MaxAttempts, Priority: job.Priority,
		Args: args, Metadata: metadata, Tags: job.Tags, Errors: job.Errors,
		AttemptedBy: job.AttemptedBy, ScheduledAt: job.ScheduledAt, FinalizedAt: job.FinalizedAt,
		UniqueKey: hex.EncodeToString(job.UniqueKey), UniqueStates: states,
	}
}

// ---- migrate ----

func migrateCommand(fs *flag.FlagSet) func(context.Context, *database) error {
	action := fs.String("action", "list", "list, up, down or validate")
	target := fs.Int("target-version", 0, "target version (down: -1 removes everything)")
	maxSteps := fs.Int("max-steps", 0, "at most this many steps")
	return func(ctx context.Context, db *database) error {
		return withDriver(db,
			func(e env[pgx.Tx]) error { return migrate(ctx, e, *action, *target, *maxSteps) },
			func(e env[*sql.Tx]) error { return migrate(ctx, e, *action, *target, *maxSteps) })
	}
}

func migrate[TTx any](ctx context.Context, e env[TTx], action string, target, maxSteps int) error {
	migrator, err := rivermigrate.New(e.driver, &rivermigrate.Config{Schema: e.db.schema})
	if err != nil {
		return err
	}
	versionsOf := func(ms []rivermigrate.Migration) []int {
		out := []int{}
		for _, m := range ms {
			out = append(out, m.Version)
		}
		return out
	}
	switch action {
	case "list":
		existing, err := migrator.ExistingVersions(ctx)
		if err != nil {
			return err
		}
		emit(map[string]any{"existing": versionsOf(existing), "all": versionsOf(migrator.AllVersions())})
	case "up", "down":
		res, err := migrator.Migrate(ctx, rivermigrate.Direction(action),
			&rivermigrate.MigrateOpts{TargetVersion: target, MaxSteps: maxSteps})
		if err != nil {
			return err
		}
		applied := []int{}
		for _, v := range res.Versions {
			applied = append(applied, v.Version)
		}
		emit(map[string]any{"direction": string(res.Direction), "versions": applied})
	case "validate":
		res, err := migrator.Validate(ctx, &rivermigrate.ValidateOpts{TargetVersion: target})
		if err != nil {
			return err
		}
		emit(map[string]any{"ok": res.OK, "messages": append([]string{}, res.Messages...)})
	default:
		return fmt.Errorf("unknown migrate action %q", action)
	}
	return nil
}

// ---- insert ----

// insertRequest is read from stdin: the API to call and the jobs.
type insertRequest struct {
	// Mode is insert (one Insert per job), insert_tx (InsertTx per job, one transaction),
	// insert_many, insert_many_tx, insert_many_fast or insert_many_fast_tx.
	Mode string `json:"mode"`
	// Rollback rolls the transaction of a *_tx mode back instead of committing it.
	Rollback bool         `json:"rollback"`
	Jobs     []insertSpec `json:"jobs"`
}

type insertSpec struct {
	Type string          `json:"type"`
	Kind string          `json:"kind"`
	Args json.RawMessage `json:"args"`
	Opts *insertOptsJSON `json:"opts"`
}

type insertOptsJSON struct {
	Queue       string          `json:"queue"`
	Priority    int             `json:"priority"`
	MaxAttempts int             `json:"max_attempts"`
	Tags        []string        `json:"tags"`
	Metadata    json.RawMessage `json:"metadata"`
	ScheduledAt *time.Time      `json:"scheduled_at"`
	Pending     bool            `json:"pending"`
	Unique      *struct {
		ByArgs          bool     `json:"by_args"`
		ByPeriodSeconds float64  `json:"by_period_seconds"`
		ByQueue         bool     `json:"by_queue"`
		ByState         []string `json:"by_state"`
		ExcludeKind     bool     `json:"exclude_kind"`
	} `json:"unique"`
}

func (o *insertOptsJSON) toRiver() *river.InsertOpts {
	if o == nil {
		return nil
	}
	opts := &river.InsertOpts{
		Queue: o.Queue, Priority: o.Priority, MaxAttempts: o.MaxAttempts, Tags: o.Tags,
		Metadata: o.Metadata, Pending: o.Pending,
	}
	if o.ScheduledAt != nil {
		opts.ScheduledAt = *o.ScheduledAt
	}
	if u := o.Unique; u != nil {
		opts.UniqueOpts = river.UniqueOpts{
			ByArgs:      u.ByArgs,
			ByPeriod:    time.Duration(u.ByPeriodSeconds * float64(time.Second)),
			ByQueue:     u.ByQueue,
			ExcludeKind: u.ExcludeKind,
		}
		for _, s := range u.ByState {
			opts.UniqueOpts.ByState = append(opts.UniqueOpts.ByState, rivertype.JobState(s))
		}
	}
	return opts
}

func insertCommand(fs *flag.FlagSet) func(context.Context, *database) error {
	return func(ctx context.Context, db *database) error {
		body, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		var req insertRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return fmt.Errorf("insert request: %w", err)
		}
		return withDriver(db,
			func(e env[pgx.Tx]) error { return insert(ctx, e, &req) },
			func(e env[*sql.Tx]) error { return insert(ctx, e, &req) })
	}
}

func insert[TTx any](ctx context.Context, e env[TTx], req *insertRequest) error {
	client, err := river.NewClient(e.driver, &river.Config{Schema: e.db.schema})
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, 0, len(req.Jobs))
	for _, spec := range req.Jobs {
		args, err := argsFor(spec.Type, spec.Kind, spec.Args)
		if err != nil {
			return err
		}
		params = append(params, river.InsertManyParams{Args: args, InsertOpts: spec.Opts.toRiver()})
	}
	var results []*rivertype.JobInsertResult
	count := -1
	inTx := func(body func(tx TTx) error) error {
		tx, finish, err := e.begin(ctx)
		if err != nil {
			return err
		}
		if err := body(tx); err != nil {
			_ = finish(false)
			return err
		}
		return finish(!req.Rollback)
	}
	switch req.Mode {
	case "insert":
		for _, p := range params {
			res, err := client.Insert(ctx, p.Args, p.InsertOpts)
			if err != nil {
				return err
			}
			results = append(results, res)
		}
	case "insert_tx":
		err = inTx(func(tx TTx) error {
			for _, p := range params {
				res, err := client.InsertTx(ctx, tx, p.Args, p.InsertOpts)
				if err != nil {
					return err
				}
				results = append(results, res)
			}
			return nil
		})
	case "insert_many":
		results, err = client.InsertMany(ctx, params)
	case "insert_many_tx":
		err = inTx(func(tx TTx) (err error) {
			results, err = client.InsertManyTx(ctx, tx, params)
			return err
		})
	case "insert_many_fast":
		count, err = client.InsertManyFast(ctx, params)
	case "insert_many_fast_tx":
		err = inTx(func(tx TTx) (err error) {
			count, err = client.InsertManyFastTx(ctx, tx, params)
			return err
		})
	default:
		return fmt.Errorf("unknown insert mode %q", req.Mode)
	}
	if err != nil {
		return err
	}
	out := []map[string]any{}
	for _, r := range results {
		out = append(out, map[string]any{"job": toJSON(r.Job), "unique_skipped_as_duplicate": r.UniqueSkippedAsDuplicate})
	}
	if count < 0 {
		count = len(results)
	}
	emit(map[string]any{"results": out, "count": count})
	return nil
}

// ---- job ----

func jobCommand(fs *flag.FlagSet) func(context.Context, *database) error {
	action := fs.String("action", "get", "get, cancel, retry or delete")
	id := fs.Int64("id", 0, "job ID")
	return func(ctx context.Context, db *database) error {
		return withDriver(db,
			func(e env[pgx.Tx]) error { return jobAction(ctx, e, *action, *id) },
			func(e env[*sql.Tx]) error { return jobAction(ctx, e, *action, *id) })
	}
}

func jobAction[TTx any](ctx context.Context, e env[TTx], action string, id int64) error {
	client, err := river.NewClient(e.driver, &river.Config{Schema: e.db.schema})
	if err != nil {
		return err
	}
	var job *rivertype.JobRow
	switch action {
	case "get":
		job, err = client.JobGet(ctx, id)
	case "cancel":
		job, err = client.JobCancel(ctx, id)
	case "retry":
		job, err = client.JobRetry(ctx, id)
	case "delete":
		job, err = client.JobDelete(ctx, id)
	default:
		return fmt.Errorf("unknown job action %q", action)
	}
	if err != nil {
		return err
	}
	emit(map[string]any{"job": toJSON(job)})
	return nil
}
