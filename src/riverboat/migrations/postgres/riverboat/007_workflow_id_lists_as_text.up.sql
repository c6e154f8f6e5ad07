-- Version 7 of riverboat's line lets riverboat write a workflow task's id lists
-- (metadata's riverboat_workflow.dep_ids and dependent_ids) as one string of
-- comma-separated ids instead of a JSON array: River's GIN index on metadata holds an
-- entry per array element, and a fan-out's root or a fan-in's join lists hundreds.
-- Releases before the one that ships this version read only arrays: apply it once every
-- riverboat process that shares this schema runs that release or a later one (they read
-- both forms). Nothing changes in the schema; rows written as arrays stay as they are.
SELECT 1;
