-- The pre-005 bookkeeping table, kept so that a database migrated by older River
-- releases and one migrated by riverboat go through the same 005 rebuild.
CREATE TABLE <schema>river_migration (
    id bigserial PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    version bigint NOT NULL,
    CONSTRAINT version CHECK (version >= 1)
);

CREATE UNIQUE INDEX river_migration_version_idx ON <schema>river_migration USING btree (version);
