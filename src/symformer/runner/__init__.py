"""The job runner the experiments hand their independent sub-runs to: `jobs` (Job, run_jobs: record, resume, raise),
`executors` (the engine `reproduce --executor` names: the local pool of `local_pool`, submitit's slots of
`slots` / `submitit_engine`, Ray in `ray_engine`, all behind `engine`), the records' protocol and provenance
(`plan_record`, `records`) and `devices` (moving a data split to RunContext.device). It knows no experiment:
experiments/ imports it, never the other way round. ray and submitit are optional extras, imported only when their
engine starts."""
