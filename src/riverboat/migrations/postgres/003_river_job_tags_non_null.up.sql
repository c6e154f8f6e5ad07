ALTER TABLE <schema>river_job ALTER COLUMN tags SET DEFAULT '{}';
UPDATE <schema>river_job SET tags = '{}' WHERE tags IS NULL;
ALTER TABLE <schema>river_job ALTER COLUMN tags SET NOT NULL;
