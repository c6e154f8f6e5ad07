package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
)

// resumableKind's jobs walk items 0..items-1 in the cursor step "process" (after a plain
// step "prepare" when asked), then run the step "finish". On attempt 1 they stop at item fail_at: they record fail_at as the
// step's cursor (with ResumableSetStepCursorTx when use_tx, else ResumableSetCursor)
// and fail, so the next attempt, on either side, resumes there.
const resumableKind = "resumable_items"

type resumableArgs struct {
	Items  int  `json:"items"`
	FailAt int  `json:"fail_at"`
	UseTx  bool `json:"use_tx"`
	// Prepare adds a plain step "prepare" before "process".
	Prepare bool `json:"prepare"`
}

func resumableWork[TTx any](ctx context.Context, e env[TTx], job *river.Job[RawArgs]) error {
	emit(map[string]any{"event": "run", "id": job.ID, "kind": job.Kind, "queue": job.Queue, "attempt": job.Attempt})
	var args resumableArgs
	if err := json.Unmarshal(job.Args.raw, &args); err != nil {
		return err
	}
	if args.Prepare {
		river.ResumableStep(ctx, "prepare", nil, func(ctx context.Context) error { return nil })
	}
	river.ResumableStepCursor(ctx, "process", nil, func(ctx context.Context, cursor int) error {
		for i := cursor; i < args.Items; i++ {
			if i == args.FailAt && job.Attempt == 1 {
				if args.UseTx {
					tx, finish, err := e.begin(ctx)
					if err != nil {
						return err
					}
					if _, err := river.ResumableSetStepCursorTx[riverdriver.Driver[TTx]](ctx, tx, job, i); err != nil {
						_ = finish(false)
						return err
					}
					if err := finish(true); err != nil {
						return err
					}
				} else if err := river.ResumableSetCursor(ctx, i); err != nil {
					return err
				}
				return errors.New("stopped at an item on purpose")
			}
			emit(map[string]any{"event": "item", "id": job.ID, "item": i})
		}
		return nil
	})
	river.ResumableStep(ctx, "finish", nil, func(ctx context.Context) error {
		emit(map[string]any{"event": "finish", "id": job.ID})
		return nil
	})
	emit(map[string]any{"event": "done", "id": job.ID, "kind": job.Kind, "attempt": job.Attempt})
	return nil
}
