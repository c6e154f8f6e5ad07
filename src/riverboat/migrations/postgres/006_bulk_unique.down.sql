DROP INDEX <schema>river_job_unique_idx;

ALTER TABLE <schema>river_job DROP COLUMN unique_states;

CREATE UNIQUE INDEX IF NOT EXISTS river_job_kind_unique_key_idx ON <schema>river_job (kind, unique_key)
    WHERE unique_key IS NOT NULL;

DROP FUNCTION <schema>river_job_state_in_bitmask(bit(8), <schema>river_job_state);
