"""Jobs as Kueue users submit them, and the Workloads Kueue's job framework makes of them.

`framework` holds what every kind of job shares (Kueue's pkg/controller/jobframework), against the
`GenericJob` protocol; `batch_job` is the batch/v1 Job integration (pkg/controller/jobs/job);
`workload_names` the Workload's name. Everything here is pure: runners and the client do the I/O.
"""
