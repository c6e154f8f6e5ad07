-- Version 8 of riverboat's line lets riverboat write a workflow task's dependencies,
-- dependents and name as one string, metadata's riverboat_workflow.node
-- ("<dependency ids>;<dependent ids>;<name>"), instead of the keys dep_ids, dependent_ids
-- and task: River's GIN index on metadata holds an entry per key and per value, at every
-- write of a row (insert, promotion, claim, completion). Releases before the one that
-- ships this version read only the separate keys: apply it once every riverboat process
-- that shares this schema runs that release or a later one (they read both forms).
-- Nothing changes in the schema; rows written with the separate keys stay as they are.
SELECT 1;
