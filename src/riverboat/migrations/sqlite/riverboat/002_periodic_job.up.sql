-- riverboat's durable periodic jobs; see the Postgres twin for what each column is.
-- Times are UTC text ('YYYY-MM-DD HH:MM:SS.ffffff': microseconds, so that a tick read
-- back is the tick that was written).
CREATE TABLE <schema>riverboat_periodic_job (
    id text PRIMARY KEY NOT NULL,
    schedule text NOT NULL,
    catch_up text NOT NULL,
    next_run_at timestamp,
    last_run_at timestamp,
    template blob,
    removed_at timestamp,
    created_at timestamp NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at timestamp NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    CONSTRAINT id_length CHECK (length(id) > 0 AND length(id) < 128),
    CONSTRAINT catch_up_known CHECK (catch_up IN ('none', 'one', 'all'))
);
