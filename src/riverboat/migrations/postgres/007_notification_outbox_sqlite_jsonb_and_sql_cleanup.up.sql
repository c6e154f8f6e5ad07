-- An outbox for databases without LISTEN/NOTIFY (SQLite). Postgres keeps using
-- NOTIFY; the table exists so that both schemas have the same tables.
CREATE TABLE <schema>river_notification (
    id bigserial PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    payload text NOT NULL,
    topic text NOT NULL,
    CONSTRAINT topic_length CHECK (length(topic) > 0 AND length(topic) < 128)
);

CREATE INDEX river_notification_created_at_idx ON <schema>river_notification (created_at);
CREATE INDEX river_notification_topic_id_idx ON <schema>river_notification (topic, id);

-- The JSONB conversion of this version concerns SQLite only: Postgres columns are
-- jsonb already.

DROP TABLE <schema>river_client_queue;
DROP TABLE <schema>river_client;

ALTER TABLE <schema>river_job ALTER COLUMN max_attempts SET DEFAULT 25;

ALTER TABLE <schema>river_queue ALTER COLUMN updated_at SET DEFAULT CURRENT_TIMESTAMP;
