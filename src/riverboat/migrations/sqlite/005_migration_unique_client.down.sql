DROP TABLE <schema>river_client_queue;
DROP TABLE <schema>river_client;

-- Back to one row per version. Rows of other lines would collide on version, so a
-- database that has them cannot go below 005 (the insert fails and the step rolls back).
CREATE TABLE <schema>river_migration_prev (
    id integer PRIMARY KEY,
    created_at timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
    version integer NOT NULL,
    CONSTRAINT version CHECK (version >= 1)
);

INSERT INTO <schema>river_migration_prev (created_at, version)
SELECT created_at, version FROM <schema>river_migration ORDER BY line, version;

DROP TABLE <schema>river_migration;

ALTER TABLE <schema>river_migration_prev RENAME TO river_migration;

CREATE UNIQUE INDEX <schema>river_migration_version_idx ON river_migration (version);
