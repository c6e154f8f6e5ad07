-- Back to arrays, for the releases before version 7 that read only them: every id list
-- written as a string becomes the JSON array of the same ids. A string that is not a
-- list of ids (written by hand) is left as it is.
UPDATE <schema>river_job
SET metadata = jsonb_set(metadata, '{riverboat_workflow}',
    (metadata->'riverboat_workflow')
    || CASE WHEN (metadata->'riverboat_workflow'->>'dep_ids') ~ '^([0-9]{1,18}(,[0-9]{1,18})*)?$'
                 AND jsonb_typeof(metadata->'riverboat_workflow'->'dep_ids') = 'string'
            THEN jsonb_build_object('dep_ids', to_jsonb(coalesce(string_to_array(
                     nullif(metadata->'riverboat_workflow'->>'dep_ids', ''), ',')::bigint[],
                     ARRAY[]::bigint[])))
            ELSE '{}'::jsonb END
    || CASE WHEN (metadata->'riverboat_workflow'->>'dependent_ids')
                     ~ '^([0-9]{1,18}(,[0-9]{1,18})*)?$'
                 AND jsonb_typeof(metadata->'riverboat_workflow'->'dependent_ids') = 'string'
            THEN jsonb_build_object('dependent_ids', to_jsonb(coalesce(string_to_array(
                     nullif(metadata->'riverboat_workflow'->>'dependent_ids', ''), ',')::bigint[],
                     ARRAY[]::bigint[])))
            ELSE '{}'::jsonb END)
WHERE jsonb_typeof(metadata->'riverboat_workflow') = 'object'
  AND (jsonb_typeof(metadata->'riverboat_workflow'->'dep_ids') = 'string'
       OR jsonb_typeof(metadata->'riverboat_workflow'->'dependent_ids') = 'string');
