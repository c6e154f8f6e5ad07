-- Key river_migration by (line, version) so that plugins can keep their own lines.
-- The table is rebuilt rather than altered, as upstream does, so the resulting
-- catalog (down to the primary key's generated name) is the same. A database whose
-- schema is managed by another tool may have no river_migration at all; leave it so.
DO $rebuild$
BEGIN
    IF to_regclass('<schema>river_migration') IS NULL THEN
        RETURN;
    END IF;

    ALTER TABLE <schema>river_migration RENAME TO river_migration_old;

    CREATE TABLE <schema>river_migration (
        line text NOT NULL,
        version bigint NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT line_length CHECK (char_length(line) > 0 AND char_length(line) < 128),
        CONSTRAINT version_gte_1 CHECK (version >= 1),
        PRIMARY KEY (line, version)
    );

    INSERT INTO <schema>river_migration (line, version, created_at)
    SELECT 'main', version, created_at FROM <schema>river_migration_old;

    DROP TABLE <schema>river_migration_old;
END
$rebuild$;

-- IF NOT EXISTS lets operators of large tables build the index CONCURRENTLY ahead of
-- the migration and then run it.
ALTER TABLE <schema>river_job ADD COLUMN IF NOT EXISTS unique_key bytea;

CREATE UNIQUE INDEX IF NOT EXISTS river_job_kind_unique_key_idx ON <schema>river_job (kind, unique_key)
    WHERE unique_key IS NOT NULL;

-- Reserved upstream for a feature that never shipped; 007 drops both tables again.
CREATE UNLOGGED TABLE <schema>river_client (
    id text PRIMARY KEY NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    metadata jsonb NOT NULL DEFAULT '{}',
    paused_at timestamptz,
    updated_at timestamptz NOT NULL,
    CONSTRAINT name_length CHECK (char_length(id) > 0 AND char_length(id) < 128)
);

CREATE UNLOGGED TABLE <schema>river_client_queue (
    river_client_id text NOT NULL REFERENCES <schema>river_client (id) ON DELETE CASCADE,
    name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    max_workers bigint NOT NULL DEFAULT 0,
    metadata jsonb NOT NULL DEFAULT '{}',
    num_jobs_completed bigint NOT NULL DEFAULT 0,
    num_jobs_running bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (river_client_id, name),
    CONSTRAINT name_length CHECK (char_length(name) > 0 AND char_length(name) < 128),
    CONSTRAINT num_jobs_completed_zero_or_positive CHECK (num_jobs_completed >= 0),
    CONSTRAINT num_jobs_running_zero_or_positive CHECK (num_jobs_running >= 0)
);
