-- Bit 7 (the rightmost, least significant) is 'available', bit 0 'scheduled': the
-- same encoding clients compute for unique_states. The body text is kept exactly as
-- upstream stores it so that schema dumps of either project compare equal.
CREATE OR REPLACE FUNCTION <schema>river_job_state_in_bitmask(bitmask bit(8), state <schema>river_job_state)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT CASE state
        WHEN 'available' THEN get_bit(bitmask, 7)
        WHEN 'cancelled' THEN get_bit(bitmask, 6)
        WHEN 'completed' THEN get_bit(bitmask, 5)
        WHEN 'discarded' THEN get_bit(bitmask, 4)
        WHEN 'pending'   THEN get_bit(bitmask, 3)
        WHEN 'retryable' THEN get_bit(bitmask, 2)
        WHEN 'running'   THEN get_bit(bitmask, 1)
        WHEN 'scheduled' THEN get_bit(bitmask, 0)
        ELSE 0
    END = 1;
$$;

-- IF NOT EXISTS: operators of large tables may have added the column and built the
-- index CONCURRENTLY beforehand.
ALTER TABLE <schema>river_job ADD COLUMN IF NOT EXISTS unique_states bit(8);

CREATE UNIQUE INDEX IF NOT EXISTS river_job_unique_idx ON <schema>river_job (unique_key)
    WHERE unique_key IS NOT NULL
      AND unique_states IS NOT NULL
      AND <schema>river_job_state_in_bitmask(unique_states, state);

DROP INDEX <schema>river_job_kind_unique_key_idx;
