package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

type workFlags struct {
	id                string
	queues            string
	kinds             string
	maxWorkers        int
	retryAfter        float64
	pollOnly          bool
	periodicKind      string
	periodicInterval  float64
	periodicUnique    bool
	periodicQueue     string
	noLeaderElection  bool
	softStopTimeoutMs int
	fetchCooldownMs   float64
	fetchPollMs       float64
	quiet             bool
}

func workCommand(fs *flag.FlagSet) func(context.Context, *database) error {
	f := &workFlags{}
	fs.StringVar(&f.id, "id", "", "client ID (River's leader ID); default go-<pid>")
	fs.StringVar(&f.queues, "queues", "default", "comma-separated queues to work")
	fs.StringVar(&f.kinds, "kinds", "", "comma-separated kinds worked with raw args (besides the typed ones)")
	fs.IntVar(&f.maxWorkers, "max-workers", 10, "workers per queue")
	fs.Float64Var(&f.retryAfter, "retry-after", 0, "retry failed jobs after this many seconds (0: River's backoff)")
	fs.BoolVar(&f.pollOnly, "poll-only", false, "no LISTEN/NOTIFY")
	fs.StringVar(&f.periodicKind, "periodic-kind", "", "run a periodic job of this kind (args {\"from\":\"go\"})")
	fs.Float64Var(&f.periodicInterval, "periodic-interval", 1, "the periodic job's interval in seconds")
	fs.BoolVar(&f.periodicUnique, "periodic-unique", false, "the periodic job is unique by period (its interval)")
	fs.StringVar(&f.periodicQueue, "periodic-queue", "", "the periodic job's queue (default: River's)")
	fs.BoolVar(&f.noLeaderElection, "no-leader-election", false, "never become leader")
	fs.IntVar(&f.softStopTimeoutMs, "soft-stop-timeout-ms", 10000, "how long Stop waits for running jobs")
	fs.Float64Var(&f.fetchCooldownMs, "fetch-cooldown-ms", 20, "River's FetchCooldown in ms (0: River's default, 100 ms)")
	fs.Float64Var(&f.fetchPollMs, "fetch-poll-interval-ms", 100, "River's FetchPollInterval in ms (0: River's default, 1 s)")
	fs.BoolVar(&f.quiet, "quiet", false, "the -kinds are no-ops and print nothing per job (riverboat bench --compare-river)")
	return func(ctx context.Context, db *database) error {
		return withDriver(db,
			func(e env[pgx.Tx]) error { return work(ctx, e, f) },
			func(e env[*sql.Tx]) error { return work(ctx, e, f) })
	}
}

// behaviour is what a job's args ask the Go worker to do.
type behaviour struct {
	Do             string  `json:"do"`
	FailAttempts   int     `json:"fail_attempts"`
	Message        string  `json:"message"`
	SnoozeSeconds  float64 `json:"snooze_seconds"`
	SleepMs        int     `json:"sleep_ms"`
	RecordOutput   any     `json:"record_output"`
	ExpectedWorker string  `json:"expected_worker"`
}

type fixedRetry struct{ after time.Duration }

func (p fixedRetry) NextRetry(job *rivertype.JobRow) time.Time { return time.Now().Add(p.after) }

func work[TTx any](ctx context.Context, e env[TTx], f *workFlags) error {
	id := f.id
	if id == "" {
		id = fmt.Sprintf("go-%d", os.Getpid())
	}
	workers := river.NewWorkers()
	for _, kind := range append(strings.Split(f.kinds, ","), mapKind) {
		if kind = strings.TrimSpace(kind); kind != "" {
			river.AddWorkerArgs(workers, RawArgs{kind: kind}, river.WorkFunc(func(ctx context.Context, job *river.Job[RawArgs]) error {
				if f.quiet {
					return nil // a no-op, as riverboat bench's jobs (no line per job to pay for)
				}
				return perform(ctx, job.JobRow, job.Args.raw)
			}))
		}
	}
	river.AddWorkerArgs(workers, RawArgs{kind: resumableKind}, river.WorkFunc(func(ctx context.Context, job *river.Job[RawArgs]) error {
		return resumableWork(ctx, e, job)
	}))
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[UniqueFieldsArgs]) error {
		return perform(ctx, job.JobRow, nil)
	}))
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[PathyFieldsArgs]) error {
		return perform(ctx, job.JobRow, nil)
	}))
	queues := map[string]river.QueueConfig{}
	for _, q := range strings.Split(f.queues, ",") {
		if q = strings.TrimSpace(q); q != "" {
			queues[q] = river.QueueConfig{MaxWorkers: f.maxWorkers}
		}
	}
	config := &river.Config{
		ID:                     id,
		Schema:                 e.db.schema,
		Queues:                 queues,
		Workers:                workers,
		FetchPollInterval:      time.Duration(f.fetchPollMs * float64(time.Millisecond)),
		FetchCooldown:          time.Duration(f.fetchCooldownMs * float64(time.Millisecond)),
		PollOnly:               f.pollOnly,
		LeaderElectionDisabled: f.noLeaderElection,
		Middleware:             []rivertype.Middleware{&insertReporter{}},
		Logger:                 slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if f.retryAfter > 0 {
		config.RetryPolicy = fixedRetry{after: time.Duration(f.retryAfter * float64(time.Second))}
	}
	if f.periodicKind != "" {
		interval := time.Duration(f.periodicInterval * float64(time.Second))
		kind, unique, queue := f.periodicKind, f.periodicUnique, f.periodicQueue
		config.PeriodicJobs = []*river.PeriodicJob{river.NewPeriodicJob(
			river.PeriodicInterval(interval),
			func() (river.JobArgs, *river.InsertOpts) {
				opts := &river.InsertOpts{Queue: queue}
				if unique {
					opts.UniqueOpts = river.UniqueOpts{ByPeriod: interval}
				}
				return RawArgs{kind: kind, raw: json.RawMessage(`{"from":"go"}`)}, opts
			},
			&river.PeriodicJobOpts{ID: kind, RunOnStart: true},
		)}
	}
	client, err := river.NewClient(e.driver, config)
	if err != nil {
		return err
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	if err := client.Start(ctx); err != nil {
		return err
	}
	emit(map[string]any{"event": "started", "client_id": id})
	<-signals
	stopCtx, cancel := context.WithTimeout(ctx, time.Duration(f.softStopTimeoutMs)*time.Millisecond)
	defer cancel()
	go func() {
		// A second signal stops hard: running jobs' contexts are cancelled.
		<-signals
		cancel()
	}()
	if err := client.Stop(stopCtx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	emit(map[string]any{"event": "stopped", "client_id": id})
	return nil
}

// perform does what the args ask and reports it on stdout: a "run" line when the job
// starts, a "done" line with the outcome when it returns.
func perform(ctx context.Context, job *rivertype.JobRow, raw json.RawMessage) error {
	emit(map[string]any{"event": "run", "id": job.ID, "kind": job.Kind, "queue": job.Queue, "attempt": job.Attempt})
	var b behaviour
	if len(raw) > 0 {
		// Args that are not an object (or lack "do") just complete.
		_ = json.Unmarshal(raw, &b)
	}
	err := act(ctx, job, &b)
	outcome := "ok"
	if err != nil {
		outcome = err.Error()
	}
	emit(map[string]any{"event": "done", "id": job.ID, "kind": job.Kind, "attempt": job.Attempt, "outcome": outcome})
	return err
}

func act(ctx context.Context, job *rivertype.JobRow, b *behaviour) error {
	message := b.Message
	if message == "" {
		message = "go worker failed on purpose"
	}
	switch b.Do {
	case "", "ok":
		if b.RecordOutput != nil {
			return river.RecordOutput(ctx, b.RecordOutput)
		}
		return nil
	case "fail":
		if b.FailAttempts == 0 || job.Attempt <= b.FailAttempts {
			return errors.New(message)
		}
		return nil
	case "snooze":
		var metadata struct {
			Snoozes int `json:"snoozes"`
		}
		_ = json.Unmarshal(job.Metadata, &metadata)
		if metadata.Snoozes == 0 {
			return river.JobSnooze(time.Duration(b.SnoozeSeconds * float64(time.Second)))
		}
		return nil
	case "cancel":
		return river.JobCancel(errors.New(message))
	case "sleep":
		select {
		case <-time.After(time.Duration(b.SleepMs) * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case "wait_cancel":
		emit(map[string]any{"event": "waiting", "id": job.ID})
		<-ctx.Done()
		return context.Cause(ctx)
	default:
		return fmt.Errorf("unknown behaviour %q", b.Do)
	}
}

// insertReporter is a River insert middleware that prints every insert's outcome, so a
// test can await the leader's periodic inserts (and see the ones skipped as duplicates).
type insertReporter struct{ river.MiddlewareDefaults }

func (*insertReporter) InsertMany(ctx context.Context, manyParams []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	results, err := doInner(ctx)
	for _, r := range results {
		emit(map[string]any{"event": "inserted", "id": r.Job.ID, "kind": r.Job.Kind, "unique_skipped_as_duplicate": r.UniqueSkippedAsDuplicate})
	}
	return results, err
}
