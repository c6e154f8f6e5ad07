DROP TABLE <schema>river_client_queue;
DROP TABLE <schema>river_client;

-- Dropping the column drops river_job_kind_unique_key_idx with it.
ALTER TABLE <schema>river_job DROP COLUMN unique_key;

-- Back to the version-only table. Rows of other lines have nowhere to go, so refuse
-- rather than lose them.
DO $rebuild$
BEGIN
    IF to_regclass('<schema>river_migration') IS NULL THEN
        RETURN;
    END IF;

    IF EXISTS (SELECT 1 FROM <schema>river_migration WHERE line <> 'main') THEN
        RAISE EXCEPTION 'river_migration holds lines other than main; migration 005 cannot be reverted without losing them';
    END IF;

    ALTER TABLE <schema>river_migration RENAME TO river_migration_old;

    CREATE TABLE <schema>river_migration (
        id bigserial PRIMARY KEY,
        created_at timestamptz NOT NULL DEFAULT now(),
        version bigint NOT NULL,
        CONSTRAINT version CHECK (version >= 1)
    );

    CREATE UNIQUE INDEX river_migration_version_idx ON <schema>river_migration USING btree (version);

    INSERT INTO <schema>river_migration (created_at, version)
    SELECT created_at, version FROM <schema>river_migration_old ORDER BY version;

    DROP TABLE <schema>river_migration_old;
END
$rebuild$;
