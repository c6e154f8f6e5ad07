-- Back to the separate keys, for the releases before version 8 that read only them:
-- every task's node becomes its dep_ids, dependent_ids (id lists as text, as version 7
-- writes them) and task. A node that is not such a string (written by hand) is left as
-- it is.
UPDATE <schema>river_job
SET metadata = jsonb_set(metadata, '{riverboat_workflow}',
    ((metadata->'riverboat_workflow') - 'node')
    || jsonb_build_object(
        'dep_ids', split_part(metadata->'riverboat_workflow'->>'node', ';', 1),
        'dependent_ids', split_part(metadata->'riverboat_workflow'->>'node', ';', 2),
        'task', substr(metadata->'riverboat_workflow'->>'node',
                       length(split_part(metadata->'riverboat_workflow'->>'node', ';', 1))
                       + length(split_part(metadata->'riverboat_workflow'->>'node', ';', 2))
                       + 3)))
WHERE jsonb_typeof(metadata->'riverboat_workflow') = 'object'
  AND jsonb_typeof(metadata->'riverboat_workflow'->'node') = 'string'
  AND (metadata->'riverboat_workflow'->>'node') ~ '^[^;]*;[^;]*;';
